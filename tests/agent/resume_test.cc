// Resume by job identity, through the real commands: a run is its run folder, so the same
// command again resumes it; --resume never and --resume STEP; SIGUSR1 (sbatch --signal)
// saves at the next step and stops; a run resumed with a larger --steps keeps the
// learning-rate schedule it started with; a stale state-store lock of a gone owner is broken,
// a live one is exit 2. Reference numbers: an uninterrupted run of the same schedule
// (identical losses and learning rates, as resumes are exact), and the schedule by hand.
#include <fcntl.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <regex>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "runtime/runtime_helpers.h"
#include "store/store_lock.h"

namespace {

using namespace partrain::testing;

class Resume : public Runtime {
 protected:
  // `partrain run` (one rank) in run folder `run`; returns the exit code, *err its stderr.
  int cli(const std::string& run, std::vector<std::string> args, std::string* err = nullptr,
          const std::string& job = kTiny) {
    std::vector<std::string> argv{PARTRAIN_CLI, "run", job};
    argv.insert(argv.end(), args.begin(), args.end());
    Proc p = start(argv, env(run), dir_, run + "-cli");
    const int code = wait_exit(p.pid);
    if (err != nullptr) *err = slurp(p.err);
    return code;
  }
  std::string metrics(const std::string& run) const { return dir_ + "/" + run + "/metrics.jsonl"; }
  // A copy of tiny.toml with `line` added to [training].
  std::string tiny_with(const std::string& name, const std::string& line) {
    const std::string path = job_copy(kTiny, dir_, name, "");
    edit_file(path, {{"warmup_steps = 10", "warmup_steps = 10\n" + line}});
    return path;
  }
  static int committed_step(const std::string& log) {
    static const std::regex kRe("checkpoint of step ([0-9]+) committed");
    int step = -1;
    for (std::sregex_iterator it(log.begin(), log.end(), kRe), end; it != end; ++it) step = std::stoi((*it)[1].str());
    return step;
  }
};

// 12 steps, then the same run to 16: the decay's length stays 12, so steps 13..16 train at
// min_lr (1e-4), where a schedule stretched to 16 would give 7.75e-4 at step 13
// (1e-4 + 9e-4 (1 + cos(pi (12 - 10) / 6)) / 2); every step equals one run with
// decay_steps = 12 over 16 steps.
TEST_F(Resume, ALargerStepsKeepsTheLearningRateScheduleItStartedWith) {
  ASSERT_EQ(cli("run", {"--steps", "12"}), 0);
  std::string err;
  ASSERT_EQ(cli("run", {"--steps", "16"}, &err), 0) << err;
  EXPECT_NE(err.find("resuming at step 12"), std::string::npos) << err;
  ASSERT_EQ(cli("ref", {"--steps", "16"}, nullptr, tiny_with("ref.toml", "decay_steps = 12")), 0);
  const std::vector<std::string> lr = column(metrics("run"), "lr"), ref_lr = column(metrics("ref"), "lr");
  ASSERT_EQ(lr.size(), 16u);
  EXPECT_EQ(lr, ref_lr);
  for (size_t i = 12; i < 16; ++i) EXPECT_FLOAT_EQ(std::stof(lr[i]), 1e-4f) << "step " << i + 1;
  EXPECT_FLOAT_EQ(std::stof(lr[1]), 2e-4f);  // warm-up: 1e-3 x 2 / 10
  EXPECT_EQ(column(metrics("run"), "loss"), column(metrics("ref"), "loss"));
  // The file kept the first 12 lines, then a restart marker.
  const std::string text = slurp(metrics("run"));
  EXPECT_NE(text.find("{\"event\":\"restart\",\"resumed_at_step\":12,\"time\":"), std::string::npos);
  // Every line, the marker too, carries the wall clock, seconds since the epoch, within the
  // last hour.
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  static const std::regex kTime("\"time\":([0-9]+\\.[0-9]{3})");
  std::istringstream lines(text);
  int timed = 0;
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(line, m, kTime)) << "no wall-clock time: " << line;
    EXPECT_NEAR(std::stod(m[1].str()), now, 3600.0) << line;
    ++timed;
  }
  EXPECT_EQ(timed, 17);  // 12 + the marker + 4
}

// SIGUSR1 (sbatch --signal=USR1@SECONDS): every worker saves at the next step boundary and
// the agent exits 75; the next start resumes from that step and goes on exactly.
TEST_F(Resume, Usr1SavesAtTheNextStepAndTheRunGoesOnFromThere) {
  Proc p = start({PARTRAIND, "--standalone", "--nproc", "1", "--steps", "100000", kTiny}, env("run"), dir_, "usr1");
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (Clock::now() < deadline && step_lines(metrics("run")).size() < 3) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GE(step_lines(metrics("run")).size(), 3u);
  ::kill(p.pid, SIGUSR1);
  EXPECT_EQ(wait_exit(p.pid), 75);
  const std::string log = slurp(p.err);
  EXPECT_NE(log.find("USR1 received (the time limit is near"), std::string::npos) << log;
  // An orderly stop for a requeue is information, not an error, in every process's log.
  EXPECT_EQ(log.find(" ERROR "), std::string::npos) << log;
  const int saved = committed_step(log);
  ASSERT_GE(saved, 3) << log;
  EXPECT_EQ(step_lines(metrics("run")).size(), static_cast<size_t>(saved));
  // The same job again, two steps further; the reference: one run of the same schedule.
  ASSERT_EQ(agent("run", "", 1, saved + 2), 0);
  ASSERT_EQ(agent("ref", "", 1, saved + 2, tiny_with("ref.toml", "decay_steps = 100000")), 0);
  EXPECT_EQ(column(metrics("run"), "loss"), column(metrics("ref"), "loss"));
  EXPECT_EQ(column(metrics("run"), "lr"), column(metrics("ref"), "lr"));
  EXPECT_EQ(step_lines(metrics("run")).size(), static_cast<size_t>(saved + 2));
}

// --resume never: the old checkpoints are moved aside whole, training starts at step 1.
TEST_F(Resume, NeverMovesTheOldRunAsideAndStartsOver) {
  ASSERT_EQ(cli("run", {"--steps", "4"}), 0);
  std::string err;
  ASSERT_EQ(cli("run", {"--steps", "3", "--resume", "never"}, &err), 0) << err;
  EXPECT_NE(err.find("--resume never: the checkpoints under"), std::string::npos) << err;
  EXPECT_EQ(err.find("resuming at step"), std::string::npos) << err;
  bool aside = false;
  for (const auto& e : fs::directory_iterator(dir_ + "/run")) {
    if (e.path().filename().string().rfind("checkpoints.superseded-", 0) == 0) {
      aside = fs::exists(e.path() / "state.db") && fs::exists(e.path() / "step-000000000004");
    }
  }
  EXPECT_TRUE(aside) << "the old checkpoints were not kept aside";
  const std::string text = slurp(metrics("run"));
  EXPECT_NE(text.find("\"resumed_at_step\":0"), std::string::npos) << text;
  EXPECT_EQ(losses(metrics("run")).size(), 3u);  // the new run's three steps
}

// --resume STEP goes back to a committed step; the newer checkpoints are moved aside, so a
// later plain start resumes this run's own newest, never one of theirs. A step that is not
// committed is a configuration error naming the steps there are.
TEST_F(Resume, AStepGoesBackAndNoLaterStartResumesANewerOne) {
  const std::string every2 = job_copy(kTiny, dir_, "every2.toml", "");
  edit_file(every2, {{"every = 0", "every = 2"}});
  ASSERT_EQ(cli("run", {"--steps", "12"}, nullptr, every2), 0);  // checkpoints 8, 10, 12 kept
  std::string err;
  EXPECT_EQ(cli("run", {"--steps", "14", "--resume", "9"}, &err, every2), 2);
  EXPECT_NE(err.find("holds no committed checkpoint of step 9 (it holds steps 12, 10, 8)"), std::string::npos) << err;
  ASSERT_EQ(cli("run", {"--steps", "11", "--resume", "8"}, &err, every2), 0) << err;
  EXPECT_NE(err.find("resuming at step 8"), std::string::npos) << err;
  EXPECT_NE(err.find("held newer checkpoints (steps 12, 10)"), std::string::npos) << err;
  // A plain start now resumes this run's step 11, not the old 12.
  ASSERT_EQ(cli("run", {"--steps", "13"}, &err, every2), 0) << err;
  EXPECT_NE(err.find("resuming at step 11"), std::string::npos) << err;
  // Every step equals one uninterrupted run of the first start's schedule (12 steps).
  const std::string ref = tiny_with("ref.toml", "decay_steps = 12");
  ASSERT_EQ(cli("ref", {"--steps", "13"}, nullptr, ref), 0);
  EXPECT_EQ(column(metrics("run"), "loss"), column(metrics("ref"), "loss"));
}

// A state-store lock whose recorded owner is gone (a node that died holding an NFS lock: here
// another process holds the fcntl lock, and the record names a pid that has exited) is broken
// and the run resumes; one whose owner lives is exit 2 naming it, never 75.
TEST_F(Resume, AStaleLockIsBrokenALiveOneIsAConfigurationError) {
  ASSERT_EQ(cli("run", {"--steps", "2"}), 0);
  const std::string db = dir_ + "/run/checkpoints/state.db";
  // The "dead node": holds LOCK like the server of a lost NFS client would.
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t holder = ::fork();
  if (holder == 0) {
    const int fd = ::open((db + "/LOCK").c_str(), O_RDWR);
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    const char ok = ::fcntl(fd, F_SETLK, &fl) == 0 ? 1 : 0;
    (void)!::write(ready[1], &ok, 1);
    ::pause();
    ::_exit(0);
  }
  char ok = 0;
  ASSERT_EQ(::read(ready[0], &ok, 1), 1);
  ASSERT_EQ(ok, 1);
  // A live owner: the holder itself.
  partrain::store::LockOwner live = partrain::store::this_process();
  live.pid = holder;
  live.start = 0;
  std::ofstream(partrain::store::owner_file(db)) << partrain::store::encode_owner(live);
  std::string err;
  EXPECT_EQ(cli("run", {"--steps", "4"}, &err), 2) << err;
  EXPECT_NE(err.find("in use by another partrain run (pid " + std::to_string(holder)), std::string::npos) << err;
  // A gone owner: a process that has exited.
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ::waitpid(gone, nullptr, 0);
  partrain::store::LockOwner dead = partrain::store::this_process();
  dead.pid = gone;
  std::ofstream(partrain::store::owner_file(db)) << partrain::store::encode_owner(dead);
  EXPECT_EQ(cli("run", {"--steps", "4"}, &err), 0) << err;
  EXPECT_NE(err.find("broke the stale lock of pid " + std::to_string(gone)), std::string::npos) << err;
  EXPECT_NE(err.find("resuming at step 2"), std::string::npos) << err;
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
}

// After kill -9 of the coordinator (the agent and its workers), the same job starts again
// and resumes from its last committed checkpoint.
TEST_F(Resume, AKilledCoordinatorsRunResumes) {
  const std::string every2 = job_copy(kTiny, dir_, "every2.toml", "");
  edit_file(every2, {{"every = 0", "every = 2"}});
  Proc p = start({PARTRAIND, "--standalone", "--nproc", "2", "--partrain", "dp2", "--steps", "1000", every2},
                 env("run"), dir_, "killed");
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (Clock::now() < deadline && committed_step(slurp(p.err)) < 4) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const int saved = committed_step(slurp(p.err));
  ASSERT_GE(saved, 4);
  ::kill(p.pid, SIGKILL);  // the coordinator's agent; its workers are killed next
  wait_exit(p.pid);
  for (const auto& [rank, pid] : started_workers(p, metrics("run"), 2, std::chrono::seconds(1))) ::kill(pid, SIGKILL);
  Proc again = start({PARTRAIND, "--standalone", "--nproc", "2", "--partrain", "dp2", "--steps",
                      std::to_string(saved + 2), every2}, env("run"), dir_, "again");
  EXPECT_EQ(wait_exit(again.pid), 0) << slurp(again.err);
  const std::regex resumed("resuming at step ([0-9]+)");
  std::smatch m;
  const std::string log = slurp(again.err);
  ASSERT_TRUE(std::regex_search(log, m, resumed)) << log;
  EXPECT_GE(std::stoi(m[1].str()), saved);
}

}  // namespace
