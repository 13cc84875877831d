// A stop that a hung rank ignores, through the real command (issue 36, item 2): SIGTERM only
// asks a rank to stop at its next step boundary, which a rank hung in a plugin (or in a
// collective whose peer died) never reaches, nor the peers waiting for it. The agent waited
// 60 s, longer than Slurm's KillWait (default 30 s), whose SIGKILL then ended the job by a
// signal instead of exit 75. Now `partrain run --partrain=dp2 --nproc 2`, its rank 1 hung in
// the data plugin at step 3 (PARTRAIN_FAULT=plugin_hang:3:1, store/fault.h), exits 75 the
// grace after SIGTERM (the default, no setting), well inside KillWait, in one line naming both
// ranks, and no worker is left.
#include <signal.h>

#include <chrono>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.h"

namespace {

using partrain::testing::Proc;
using partrain::testing::slurp;
using partrain::testing::start;
using partrain::testing::wait_exit_within;

constexpr double kSlurmKillWait = 30;  // slurm.conf(5) KillWait's default, in seconds

TEST(StopGrace, RanksHungPastTheGraceAfterSigtermAreKilledWithinKillWait) {
  const partrain::testing::ScratchDir scratch("partrain_stop_grace");
  const std::string dir = scratch.path().string();
  std::string job = slurp(std::string(PARTRAIN_SOURCE_DIR) + "/etc/examples/tiny.toml");
  job = std::regex_replace(job, std::regex("\"data/"), "\"" + std::string(PARTRAIN_SOURCE_DIR) + "/etc/examples/data/");
  std::ofstream(dir + "/job.toml") << job;
  const std::map<std::string, std::string> env{{"PARTRAIN_SITE_CONFIG", PARTRAIN_SITE_CONFIG_FILE},
                                               {"PARTRAIN_RUN_DIR", dir + "/run"},
                                               {"OMP_NUM_THREADS", "1"},
                                               {"PARTRAIN_FAULT", "plugin_hang:3:1"}};
  Proc p = start({PARTRAIN_CLI, "run", dir + "/job.toml", "--steps", "8", "--partrain=dp2", "--nproc", "2"}, env,
                 dir, "hang");
  const auto t0 = std::chrono::steady_clock::now();
  while (slurp(p.err).find("hangs in the data plugin at step 3, rank 1") == std::string::npos &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_NE(slurp(p.err).find("hangs in the data plugin at step 3, rank 1"), std::string::npos) << slurp(p.err);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // rank 0 waits for it in the gradient sync
  ASSERT_EQ(::kill(p.pid, SIGTERM), 0);  // scancel, or the time limit
  const auto sent = std::chrono::steady_clock::now();
  const int code = wait_exit_within(p.pid, 90);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
  const std::string log = slurp(p.err);
  ASSERT_NE(code, -1) << "hung: " << log;
  EXPECT_EQ(code, 75) << log;
  // The agent says the grace when it forwards the stop, and kills when it has passed.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex("TERM received: .*those still running in ([0-9.]+) s are killed")))
      << log;
  const double grace = std::stod(m[1].str());
  EXPECT_LT(grace + 5, kSlurmKillWait) << "the default grace leaves no time before Slurm's SIGKILL";
  EXPECT_GE(took, grace - 0.1) << log;
  EXPECT_LT(took, grace + 5) << log;
  // One line names every rank that had to be killed.
  const std::regex killed("ranks 0, 1 \\(pids [0-9]+, [0-9]+\\) did not stop within [0-9.]+ s of SIGTERM[^\n]*killed "
                          "with SIGKILL");
  EXPECT_EQ(std::distance(std::sregex_iterator(log.begin(), log.end(), killed), std::sregex_iterator()), 1) << log;
  EXPECT_EQ(log.find("stopped at a step boundary"), std::string::npos) << log;
  // No worker is left.
  int workers = 0;
  const std::regex started("rank [01] started: pid ([0-9]+)");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), started); it != std::sregex_iterator(); ++it) {
    ++workers;
    const pid_t pid = static_cast<pid_t>(std::stol((*it)[1].str()));
    EXPECT_NE(::kill(pid, 0), 0) << "worker pid " << pid << " is still there";
  }
  EXPECT_EQ(workers, 2) << log;
  std::printf("rank 1 hung in the data plugin, SIGTERM to the agent: exit %d after %.1f s (grace %g s, Slurm's "
              "KillWait %g s)\n", code, took, grace, kSlurmKillWait);
}

}  // namespace
