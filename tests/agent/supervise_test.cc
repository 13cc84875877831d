// The supervise loop on real worker groups (shell scripts in place of partrain-worker, one
// per local rank) and a real rendezvous store: what ends a group, the Status and exit code
// it ends with (partraind(8), EXIT STATUS), which rank is named as the cause, what the other
// nodes are told (job/abort, restart/N), and that no worker outlives the loop.
#include "agent/supervise.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/exit_codes.h"
#include "common/stop_signal.h"
#include "rendezvous_fixture.h"
#include "test_util.h"

namespace partrain::agent {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

class Supervise : public LoopbackStore {
 protected:
  void SetUp() override {
    LoopbackStore::SetUp();
    heartbeat_ = std::make_unique<Heartbeat>(connect(milliseconds(200)), 0, 1, milliseconds(200), milliseconds(5000));
    context_.store = store_.get();
    context_.heartbeat = heartbeat_.get();
  }
  void TearDown() override {
    heartbeat_.reset();
  }

  // Starts `ranks` workers running `script` under /bin/sh, each with $R = its rank and $D =
  // a scratch folder.
  void spawn(const std::string& script, int ranks = 2) {
    std::vector<WorkerSpec> specs;
    for (int r = 0; r < ranks; ++r) {
      specs.push_back({r, r, {{"R", std::to_string(r)}, {"D", dir_}}});
    }
    ASSERT_TRUE(group_.spawn("/bin/sh", {"-c", script}, specs));
    for (const auto& [rank, pid] : group_.pids()) pids_.push_back(pid);
  }
  Result<GroupEnd> supervise() {
    t0_ = Clock::now();
    Result<GroupEnd> end = agent::supervise(group_, context_);
    secs_ = std::chrono::duration<double>(Clock::now() - t0_).count();
    return end;
  }
  std::string died(int rank, const std::string& how) const {
    return "rank " + std::to_string(rank) + " (pid " + std::to_string(pids_[static_cast<size_t>(rank)]) +
           ") died: " + how;
  }
  // Waits until every rank's script touched $D/up.$R (its traps are set).
  void wait_up(int ranks = 2) {
    for (int r = 0; r < ranks; ++r) {
      const std::string up = dir_ + "/up." + std::to_string(r);
      for (int i = 0; i < 1000 && !std::filesystem::exists(up); ++i) std::this_thread::sleep_for(milliseconds(10));
      ASSERT_TRUE(std::filesystem::exists(up)) << up;
    }
  }
  void expect_all_gone() {
    EXPECT_EQ(group_.running(), 0);
    for (pid_t pid : pids_) EXPECT_NE(::kill(pid, 0), 0) << "pid " << pid << " is still there";
  }

  const partrain::testing::ScratchDir scratch_{"partrain_supervise"};
  const std::string dir_ = scratch_.path().string();
  std::unique_ptr<Heartbeat> heartbeat_;
  SuperviseContext context_;
  WorkerGroup group_;
  std::vector<pid_t> pids_;
  Clock::time_point t0_;
  double secs_ = 0;
};

// A rank's success is its report through the store (finished/<rank>, set by the worker once
// its run reached the last step; here by the test, as the worker would) and its exit 0.
TEST_F(Supervise, EveryRankExitingZeroFinishes) {
  ASSERT_TRUE(store_->set("finished/0", "30"));
  ASSERT_TRUE(store_->set("finished/1", "30"));
  spawn("exit 0");
  Result<GroupEnd> end = supervise();
  ASSERT_TRUE(end) << end.status().message();
  EXPECT_EQ(*end, GroupEnd::kFinished);
  EXPECT_EQ(value("job/abort"), "");
}

// Issue 31, item 17: every rank exiting 0 before the end (a plugin calling exit(0)) was
// counted as finished (exit 0, no final checkpoint, never requeued). Now it is a retryable
// failure of the rank that exited, and no restart is asked for when none are left.
TEST_F(Supervise, EveryRankExitingZeroWithoutReportingTheEndIsRetryable) {
  context_.finished_prefix = "a0.0/";
  ASSERT_TRUE(store_->set("finished/0", "30"));  // another attempt's prefix: does not count
  spawn("exit 0");
  Result<GroupEnd> end = supervise();
  ASSERT_FALSE(end);
  EXPECT_EQ(exit_code_for(end.status()), kExitRetryable);
  EXPECT_NE(end.status().message().find(") exited 0 before its run reached the last step"), std::string::npos)
      << end.status().message();
  EXPECT_NE(value("job/abort"), "");
  expect_all_gone();
}

// One rank exits 0 early and its peer, which only lost it, exits 1 at once: the early exit is
// the cause, never the healthy peer's echo.
TEST_F(Supervise, RankExitingZeroEarlyIsTheCauseNotItsPeer) {
  spawn("case $R in 0) touch $D/gone; exit 0 ;; 1) while [ ! -e $D/gone ]; do sleep 0.01; done; exit 1 ;; esac");
  Result<GroupEnd> end = supervise();
  ASSERT_FALSE(end);
  EXPECT_EQ(exit_code_for(end.status()), kExitRetryable);
  const std::string want = "rank 0 (pid " + std::to_string(pids_[0]) + ") exited 0 before its run reached the last step";
  EXPECT_EQ(end.status().message().rfind(want, 0), 0u) << end.status().message();
  expect_all_gone();
}

// Rank 1 is killed 100 ms after rank 0, which only lost its peer, exits 1: the log names the
// kill, not the echo, and the job is retryable.
TEST_F(Supervise, KilledRankIsTheCauseNotItsEcho) {
  spawn("case $R in 0) while [ ! -e $D/dying ]; do sleep 0.01; done; exit 1 ;;"
        " 1) touch $D/dying; sleep 0.1; kill -9 $$ ;; esac");
  Result<GroupEnd> end = supervise();
  ASSERT_FALSE(end);
  EXPECT_EQ(exit_code_for(end.status()), kExitRetryable);
  EXPECT_EQ(end.status().message(),
            died(1, "killed by signal 9 (SIGKILL)") + "; stopping every worker of this node");
  EXPECT_EQ(value("job/abort"), "node 0: " + died(1, "killed by signal 9 (SIGKILL)"));
  expect_all_gone();
}

TEST_F(Supervise, WorkerExitTwoIsAConfigurationErrorAndTheOthersAreKilled) {
  spawn("case $R in 0) exit 2 ;; *) sleep 60 ;; esac");
  Result<GroupEnd> end = supervise();
  ASSERT_FALSE(end);
  EXPECT_EQ(exit_code_for(end.status()), kExitUsage);
  EXPECT_EQ(end.status().message(), died(0, "exited with code 2") + "; stopping every worker of this node");
  EXPECT_LT(secs_, 10.0);
  expect_all_gone();
}

TEST_F(Supervise, OtherWorkerExitIsAFailureNeverRestarted) {
  context_.max_restarts = 3;
  spawn("case $R in 1) exit 3 ;; *) sleep 60 ;; esac");
  Result<GroupEnd> end = supervise();
  ASSERT_FALSE(end);
  EXPECT_EQ(exit_code_for(end.status()), kExitFailure);
  EXPECT_EQ(value("restart/1"), "");
  expect_all_gone();
}

TEST_F(Supervise, KilledRankWithRestartsLeftAsksEveryNodeForARestart) {
  context_.restarts = 1;
  context_.max_restarts = 2;
  spawn("case $R in 1) kill -9 $$ ;; *) sleep 60 ;; esac");
  Result<GroupEnd> end = supervise();
  ASSERT_TRUE(end) << end.status().message();
  EXPECT_EQ(*end, GroupEnd::kRestart);
  EXPECT_EQ(value("restart/2"), "node 0: " + died(1, "killed by signal 9 (SIGKILL)"));
  EXPECT_EQ(value("job/abort"), "");  // a restart, not the end of the job
  expect_all_gone();
}

TEST_F(Supervise, KilledRankWithNoRestartsLeftEndsTheJob) {
  context_.restarts = 2;
  context_.max_restarts = 2;
  spawn("case $R in 1) exit 75 ;; *) sleep 60 ;; esac");
  Result<GroupEnd> end = supervise();
  ASSERT_FALSE(end);
  EXPECT_EQ(exit_code_for(end.status()), kExitRetryable);
  EXPECT_EQ(value("restart/3"), "");
  EXPECT_EQ(value("job/abort"), "node 0: " + died(1, "exited with code 75"));
  expect_all_gone();
}

TEST_F(Supervise, RestartAskedByAnotherNodeTakesThisGroupDown) {
  context_.num_nodes = 2;
  context_.max_restarts = 1;
  spawn("sleep 60");
  std::thread other([this] {
    std::this_thread::sleep_for(milliseconds(300));
    (void)store_->set("restart/1", "node 1: rank 3 (pid 9) died: killed by signal 9 (SIGKILL)");
  });
  Result<GroupEnd> end = supervise();
  other.join();
  ASSERT_TRUE(end) << end.status().message();
  EXPECT_EQ(*end, GroupEnd::kRestart);
  EXPECT_LT(secs_, 10.0);
  expect_all_gone();
}

TEST_F(Supervise, AnotherNodesAbortEndsTheJobRetryable) {
  spawn("sleep 60");
  std::thread other([this] {
    std::this_thread::sleep_for(milliseconds(300));
    (void)store_->set("job/abort", "node 1: boom");
  });
  Result<GroupEnd> end = supervise();
  other.join();
  ASSERT_FALSE(end);
  EXPECT_EQ(exit_code_for(end.status()), kExitRetryable);
  EXPECT_EQ(end.status().message(),
            "another node aborted the job: node 1: boom; stopping every worker of this node");
  EXPECT_LT(secs_, 10.0);
  expect_all_gone();
}

// SIGTERM to the agent: every worker gets it once, stops at its "step boundary" and exits
// 75; the group ends stopped, not failed.
TEST_F(Supervise, StopSignalIsForwardedAndTheGroupStops) {
  (void)install_stop_signal();
  spawn("trap 'exit 75' TERM; touch $D/up.$R; while :; do sleep 0.05; done");
  wait_up();
  ASSERT_EQ(::raise(SIGTERM), 0);
  Result<GroupEnd> end = supervise();
  ASSERT_TRUE(end) << end.status().message();
  EXPECT_EQ(*end, GroupEnd::kStopped);
  EXPECT_EQ(value("job/abort"), "");
}

// Workers that ignore SIGTERM (a rank hung in a collective or a plugin reads its stop flag
// never) are killed with SIGKILL once the grace passed, in one line naming every one.
TEST_F(Supervise, WorkersThatIgnoreTheStopAreKilledAfterTheGrace) {
  (void)install_stop_signal();
  context_.stop_grace = milliseconds(300);
  spawn("trap '' TERM; touch $D/up.$R; sleep 60");
  wait_up();
  ASSERT_EQ(::raise(SIGTERM), 0);
  Result<GroupEnd> end = supervise();
  ASSERT_FALSE(end);
  EXPECT_EQ(exit_code_for(end.status()), kExitRetryable);
  EXPECT_EQ(end.status().message(),
            "ranks 0, 1 (pids " + std::to_string(pids_[0]) + ", " + std::to_string(pids_[1]) +
                ") did not stop within 0.3 s of SIGTERM (hung in a collective or in a plugin?): killed with SIGKILL; "
                "stopping every worker of this node");
  EXPECT_NE(value("job/abort"), "");  // the other nodes' ranks wait for these: they end too
  EXPECT_GE(secs_, 0.3);
  EXPECT_LT(secs_, 10.0);
  expect_all_gone();
}

// The rank that stopped at its step boundary is not named; the one that ignored SIGTERM is.
TEST_F(Supervise, OnlyTheRanksStillRunningAfterTheGraceAreNamed) {
  (void)install_stop_signal();
  context_.stop_grace = milliseconds(300);
  spawn("case $R in 0) trap 'exit 75' TERM ;; 1) trap '' TERM ;; esac; touch $D/up.$R; "
        "while :; do sleep 0.05; done");
  wait_up();
  ASSERT_EQ(::raise(SIGTERM), 0);
  Result<GroupEnd> end = supervise();
  ASSERT_FALSE(end);
  EXPECT_EQ(exit_code_for(end.status()), kExitRetryable);
  EXPECT_EQ(end.status().message().rfind("rank 1 (pid " + std::to_string(pids_[1]) + ") did not stop within 0.3 s", 0),
            0u)
      << end.status().message();
  expect_all_gone();
}

// SIGUSR1 (sbatch --signal=USR1@SECONDS, the time limit's early warning) asks for a stop with
// no deadline, since a step and a save may take its SECONDS; the time limit's SIGTERM after
// it starts the grace.
TEST_F(Supervise, AfterSigusr1TheGraceStartsAtTheSigterm) {
  (void)install_stop_signal();
  context_.stop_grace = milliseconds(300);
  spawn("trap '' TERM; touch $D/up.$R; sleep 60");
  wait_up();
  ASSERT_EQ(::raise(SIGUSR1), 0);
  std::thread time_limit([] {
    std::this_thread::sleep_for(milliseconds(1500));
    ::kill(::getpid(), SIGTERM);
  });
  Result<GroupEnd> end = supervise();
  time_limit.join();
  ASSERT_FALSE(end);
  EXPECT_EQ(exit_code_for(end.status()), kExitRetryable);
  EXPECT_NE(end.status().message().find("did not stop within 0.3 s of SIGTERM"), std::string::npos)
      << end.status().message();
  EXPECT_GE(secs_, 1.8);  // the SIGTERM at 1.5 s, then the grace
  EXPECT_LT(secs_, 10.0);
  expect_all_gone();
}

}  // namespace
}  // namespace partrain::agent
