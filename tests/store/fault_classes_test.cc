// Issue 31's fault classes, through the real commands (`partrain run`, partraind and its
// workers for --nproc): each test names the defect it guards against.
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "run_fixture.h"

namespace {

namespace fs = std::filesystem;
using namespace partrain::testing;

class FaultClasses : public RunFixture {};

// Item 17: every rank exiting 0 at step 6 of 12 (PARTRAIN_FAULT=exit_zero, as a plugin
// calling exit(0) would) was "exit 0: done" with no final checkpoint. The rank's exit 0
// without its report of the end is a retryable failure (75, so Slurm requeues), and the
// same command resumes from step 4 onto the uninterrupted trajectory.
TEST_F(FaultClasses, EveryRankExitingZeroEarlyIsRetryableAndResumes) {
  const std::vector<Point> ref = reference("dp2", 2);
  const std::string j = job("early");
  std::string log;
  EXPECT_EQ(run(j, "early", "dp2", 2, {{"PARTRAIN_FAULT", "exit_zero:6"}}, &log), 75) << log;
  EXPECT_NE(log.find("PARTRAIN_FAULT: pid"), std::string::npos) << log;
  EXPECT_NE(log.find(") exited 0 before its run reached the last step"), std::string::npos) << log;
  EXPECT_EQ(log.find("exit 0: done"), std::string::npos) << log;
  ASSERT_EQ(run(j, "early", "dp2", 2, {}, &log), 0) << log;
  EXPECT_EQ(resumed_at(log), 4) << log;
  expect_same(ref, "early");
}

// Item 17: when one rank exits 0 early, the error names it, not the healthy peer that lost it.
TEST_F(FaultClasses, OneRankExitingZeroEarlyIsNamedAsTheCause) {
  const std::string j = job("one");
  std::string log;
  EXPECT_EQ(run(j, "one", "dp2", 2, {{"PARTRAIN_FAULT", "exit_zero:6:1"}}, &log), 75) << log;
  const std::regex cause("ERROR[^\\n]*rank ([0-9]+) \\(pid [0-9]+\\) exited 0 before its run reached the last step"
                         "[^\\n]*; stopping every worker of this node");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, cause)) << log;
  EXPECT_EQ(m[1].str(), "1") << log;
}

}  // namespace
