// The watchdog through the real command (issue 22, defect 7): a rank stopped with SIGSTOP
// (or stuck in a collective) went unnoticed until Gloo's 300 s timeout. With
// [agent] progress_timeout = 4 in the site config, `partrain run --partrain=dp2 --nproc 2`
// whose rank 1 is stopped after two steps exits 75 within a bound well under 300 s, naming
// rank 1, its step and its phase; the same command then resumes and finishes. A rank hung
// inside a plugin is named, not the peer waiting for it.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "test_util.h"

namespace {

using partrain::testing::Proc;
using partrain::testing::slurp;
using partrain::testing::start;
using partrain::testing::wait_exit_within;

TEST(Watchdog, StoppedRankEndsTheJobWithItsRankAndPhase) {
  const partrain::testing::ScratchDir scratch("partrain_watchdog");
  const std::string dir = scratch.path().string();
  const std::string site = dir + "/site.toml";
  std::ofstream(site) << slurp(PARTRAIN_SITE_CONFIG_FILE) << "\n[agent]\nprogress_timeout = 4\n";
  std::string job = slurp(std::string(PARTRAIN_SOURCE_DIR) + "/etc/examples/tiny.toml");
  job = std::regex_replace(job, std::regex("\"data/"), "\"" + std::string(PARTRAIN_SOURCE_DIR) + "/etc/examples/data/");
  job.replace(job.find("every = 0"), 9, "every = 2");
  std::ofstream(dir + "/job.toml") << job;
  const std::map<std::string, std::string> env{
      {"PARTRAIN_SITE_CONFIG", site}, {"PARTRAIN_RUN_DIR", dir + "/run"}, {"OMP_NUM_THREADS", "1"}};
  const std::vector<std::string> argv{PARTRAIN_CLI, "run", dir + "/job.toml", "--steps", "8", "--partrain=dp2",
                                      "--nproc", "2"};
  Proc p = start(argv, env, dir, "stopped");
  const auto steps = [&] {
    const std::string m = slurp(dir + "/run/metrics.jsonl");
    return std::count(m.begin(), m.end(), '\n');
  };
  const auto t0 = std::chrono::steady_clock::now();
  while (steps() < 2 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::smatch m;
  const std::string started = slurp(p.err);
  ASSERT_TRUE(std::regex_search(started, m, std::regex("rank 1 started: pid ([0-9]+)"))) << started;
  const pid_t rank1 = static_cast<pid_t>(std::stol(m[1].str()));
  ASSERT_EQ(::kill(rank1, SIGSTOP), 0);
  const auto stopped_at = std::chrono::steady_clock::now();
  const int code = wait_exit_within(p.pid, 90);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped_at).count();
  const std::string log = slurp(p.err);
  ::kill(rank1, SIGCONT);
  ASSERT_NE(code, -1) << "hung: " << log;
  EXPECT_EQ(code, 75) << log;
  EXPECT_TRUE(std::regex_search(log, std::regex("rank 1 made no progress for [0-9]+ s \\(step [0-9]+, [a-z ]+\\)")))
      << log;
  EXPECT_LT(took, 60.0) << log;
  std::printf("SIGSTOP to rank 1: the job exited 75 after %.1f s (progress_timeout 4 s)\n", took);
  // The same command resumes from the last checkpoint and finishes.
  Proc again = start(argv, env, dir, "again");
  EXPECT_EQ(wait_exit_within(again.pid, 300), 0) << slurp(again.err);
}

// Issue 31, item 23: a hang inside a plugin. Rank 1 stops in the data plugin's grads_done at
// step 3 (PARTRAIN_FAULT=plugin_hang:3:1, store/fault.h): running, in no wait, its last
// progress line a second after rank 0 began waiting for it in a collective, so rank 0 is the
// longest silent. The watchdog must end the job naming rank 1, the rank that stopped making
// progress, never rank 0, within a bound.
TEST(Watchdog, AHangInsideAPluginNamesTheHungRankNotItsWaitingPeer) {
  const partrain::testing::ScratchDir scratch("partrain_watchdog_plugin");
  const std::string dir = scratch.path().string();
  const std::string site = dir + "/site.toml";
  std::ofstream(site) << slurp(PARTRAIN_SITE_CONFIG_FILE) << "\n[agent]\nprogress_timeout = 4\n";
  std::string job = slurp(std::string(PARTRAIN_SOURCE_DIR) + "/etc/examples/tiny.toml");
  job = std::regex_replace(job, std::regex("\"data/"), "\"" + std::string(PARTRAIN_SOURCE_DIR) + "/etc/examples/data/");
  std::ofstream(dir + "/job.toml") << job;
  const std::map<std::string, std::string> env{{"PARTRAIN_SITE_CONFIG", site},
                                               {"PARTRAIN_RUN_DIR", dir + "/run"},
                                               {"OMP_NUM_THREADS", "1"},
                                               {"PARTRAIN_FAULT", "plugin_hang:3:1"}};
  const auto t0 = std::chrono::steady_clock::now();
  Proc p = start({PARTRAIN_CLI, "run", dir + "/job.toml", "--steps", "8", "--partrain=dp2", "--nproc", "2"}, env,
                 dir, "hang");
  const int code = wait_exit_within(p.pid, 120);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string log = slurp(p.err);
  ASSERT_NE(code, -1) << "hung: " << log;
  ASSERT_NE(log.find("hangs in the data plugin at step 3, rank 1"), std::string::npos) << log;
  EXPECT_EQ(code, 75) << log;
  EXPECT_TRUE(std::regex_search(log, std::regex("rank 1 made no progress for [0-9]+ s \\(step 3, in the data plugin\\)")))
      << log;
  EXPECT_EQ(log.find("rank 0 made no progress"), std::string::npos) << log;
  EXPECT_LT(took, 60.0) << log;
  std::printf("rank 1 hung in the data plugin at step 3: the job exited %d after %.1f s, naming rank 1 "
              "(progress_timeout 4 s)\n", code, took);
}

}  // namespace
