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

// A `partrain run` of one rank left running in run folder `run` (checkpoints every 4 steps),
// returned once it wrote its first step.
Proc start_live(const std::string& job, const std::string& dir, const std::string& run) {
  Proc p = start({PARTRAIN_CLI, "run", job, "--steps", "100000"},
                 {{"PARTRAIN_SITE_CONFIG", PARTRAIN_SITE_CONFIG_FILE}, {"PARTRAIN_RUN_DIR", dir + "/" + run},
                  {"OMP_NUM_THREADS", "1"}}, dir, "live." + run);
  const auto t0 = std::chrono::steady_clock::now();
  while (trajectory(dir + "/" + run + "/metrics.jsonl").size() < 5 &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return p;
}

// Item 18: `--resume never` on the run folder of a live run moved its checkpoint folder aside
// before taking the store's lock (the live run then committed to the moved store). The lock
// comes first: exit 2 naming the live run, nothing moved, and the live run goes on to save
// and stop normally.
TEST_F(FaultClasses, ResumeNeverOnALiveRunIsRefusedAndMovesNothing) {
  const std::string j = job("live");
  Proc live = start_live(j, dir_, "live");
  ASSERT_GE(trajectory(dir_ + "/live/metrics.jsonl").size(), 5u) << slurp(live.err);
  std::string log;
  EXPECT_EQ(run(j, "live", "", 0, {}, &log, {"--resume", "never"}), 2) << log;
  EXPECT_NE(log.find("--resume never: "), std::string::npos) << log;
  EXPECT_NE(log.find("in use by another partrain run (pid " + std::to_string(live.pid) + ")"), std::string::npos)
      << log;
  for (const auto& e : fs::directory_iterator(dir_ + "/live")) {
    EXPECT_EQ(e.path().filename().string().find("superseded"), std::string::npos) << e.path();
  }
  EXPECT_TRUE(fs::exists(dir_ + "/live/checkpoints/state.db"));
  EXPECT_EQ(::kill(live.pid, 0), 0) << "the live run died";
  ::kill(live.pid, SIGTERM);
  EXPECT_EQ(wait_exit(live.pid), 75) << slurp(live.err);
  // What it saved on its way out is in its own store: the folder resumes from it.
  std::string out;
  EXPECT_EQ(cli({"ckpt", "verify", dir_ + "/live"}, &out), 0) << out;
  EXPECT_NE(out.find(": ok ("), std::string::npos) << out;
}

// `text` with `from` replaced by `to` (which must be there), written to DIR/NAME.toml.
std::string variant(const std::string& dir, const std::string& name, std::string text, const std::string& from,
                    const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  const std::string path = dir + "/" + name + ".toml";
  std::ofstream(path) << text;
  return path;
}

// Item 22: a resume with changed heads, norm_eps or dropout, or with other training data (a
// new path, or the same path with new content), went on without a word. Each is refused with
// exit 2 naming the key; --resume-with-changes resumes anyway, logging the change, and the
// run's inputs are the new ones from its next commit on.
TEST_F(FaultClasses, ResumeWithChangedInputsIsRefusedNamingTheKey) {
  steps_ = 8;
  const std::string data = dir_ + "/train.bin", moved = dir_ + "/train-copy.bin";
  fs::copy_file(std::string(PARTRAIN_SOURCE_DIR) + "/etc/examples/data/licenses_train.bin", data);
  fs::copy_file(data, moved);
  const std::string text = std::regex_replace(slurp(job("inputs")), std::regex("\"[^\"]*licenses_train\\.bin\""),
                                              "\"" + data + "\"");
  const std::string j = variant(dir_, "inputs", text, "heads = 4", "heads = 4");
  std::string log;
  ASSERT_EQ(run(j, "inputs", "", 0, {}, &log), 0) << log;
  const struct {
    std::string name, from, to, named;
  } cases[] = {
      {"heads", "heads = 4", "heads = 2", "model.heads: 4 -> 2"},
      {"eps", "heads = 4", "heads = 4\nnorm_eps = 1e-6", "model.norm_eps: 1e-05 -> 1e-06"},
      {"dropout", "dropout = 0.0", "dropout = 0.1", "model.dropout: 0 -> 0.1"},
      {"path", data, moved, "data.train_files[0]: " + data + " ("},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(run(variant(dir_, c.name, text, c.from, c.to), "inputs", "", 0, {}, &log), 2) << c.name << ": " << log;
    EXPECT_NE(log.find(c.named), std::string::npos) << c.name << ": " << log;
    EXPECT_NE(log.find("--resume-with-changes"), std::string::npos) << c.name << ": " << log;
  }
  // The same path with new content: one token in the middle of the shard (the low byte of a
  // little-endian uint16 after the 1024-byte llm.c header: still a byte-level token).
  {
    std::fstream f(data, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(data) / 4 * 2));
    f.put('\x7f');
  }
  EXPECT_EQ(run(j, "inputs", "", 0, {}, &log), 2) << log;
  EXPECT_NE(log.find("data.train_files[0]: " + data + " (" + std::to_string(fs::file_size(data)) + " bytes, crc32c:"),
            std::string::npos) << log;
  // On purpose: resumed at 8, the change logged; later starts compare with the new inputs.
  steps_ = 12;
  ASSERT_EQ(run(j, "inputs", "", 0, {}, &log, {"--resume-with-changes"}), 0) << log;
  EXPECT_EQ(resumed_at(log), 8) << log;
  EXPECT_NE(log.find("--resume-with-changes: resuming"), std::string::npos) << log;
  EXPECT_NE(log.find("data.train_files[0]"), std::string::npos) << log;
  EXPECT_EQ(run(j, "inputs", "", 0, {}, &log), 0) << log;
  EXPECT_EQ(log.find("--resume-with-changes"), std::string::npos) << log;
}

// Item 22 through partraind (--nproc): the agent's coordinator refuses the same way, exit 2.
TEST_F(FaultClasses, AgentRefusesChangedInputsToo) {
  steps_ = 4;
  const std::string j = job("agent");
  std::string log;
  ASSERT_EQ(run(j, "agent", "dp2", 2, {}, &log), 0) << log;
  const std::string changed = variant(dir_, "agent-heads", slurp(j), "heads = 4", "heads = 8");
  EXPECT_EQ(run(changed, "agent", "dp2", 2, {}, &log), 2) << log;
  EXPECT_NE(log.find("model.heads: 4 -> 8"), std::string::npos) << log;
  steps_ = 8;
  EXPECT_EQ(run(changed, "agent", "dp2", 2, {}, &log, {"--resume-with-changes"}), 0) << log;
  EXPECT_EQ(resumed_at(log), 4) << log;
}

// Mounts a 64 KiB tmpfs at `mnt` and fills it to the last byte, leaving an empty file `name`
// on it: every write to that file then fails with ENOSPC. False (the test skips) without root.
bool full_disk(const std::string& mnt, const std::string& name, std::string* mounted) {
  fs::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k") != 0) return false;
  *mounted = mnt;
  std::ofstream(mnt + "/" + name).flush();
  std::ofstream fill(mnt + "/filler", std::ios::binary);
  const std::string block(4096, 'x');
  for (int i = 0; i < 64 && fill; ++i) fill.write(block.data(), static_cast<std::streamsize>(block.size())) << std::flush;
  return true;
}

// Item 21: a metrics.jsonl whose writes fail (its disk full) gave exit 0 and an empty file,
// while the same failure on the TensorBoard file exits 1. Now it is exit 1 naming the file,
// on one rank and through partraind.
TEST_F(FaultClasses, FailedMetricsWriteIsAnErrorNamingTheFile) {
  steps_ = 4;
  if (!full_disk(dir_ + "/full", "metrics.jsonl", &mounted_)) GTEST_SKIP() << "cannot mount a tmpfs (needs root)";
  const std::string j = job("metrics");
  for (const auto& [run_name, nproc] : {std::pair<std::string, int>{"one", 0}, {"two", 2}}) {
    fs::create_directories(dir_ + "/" + run_name);
    fs::create_symlink(dir_ + "/full/metrics.jsonl", dir_ + "/" + run_name + "/metrics.jsonl");
    std::string log;
    EXPECT_EQ(run(j, run_name, "dp2", nproc, {}, &log), 1) << run_name << ": " << log;
    EXPECT_NE(log.find(dir_ + "/" + run_name + "/metrics.jsonl: cannot write the run's metrics: No space left on "
                       "device"), std::string::npos) << run_name << ": " << log;
  }
}

// Item 25: two jobs sharing a run folder with different checkpoint folders both appended to
// its one metrics.jsonl. The run folder's lock covers the metrics: the second is exit 2
// naming the folder and the live run, and the first's file holds only its own steps.
TEST_F(FaultClasses, SecondJobOnALiveRunFolderIsRefused) {
  const std::string first = job("first", "dir = \"" + dir_ + "/ckpt-first\"\n");
  const std::string second = job("second", "dir = \"" + dir_ + "/ckpt-second\"\n");
  Proc live = start_live(first, dir_, "shared");
  ASSERT_GE(trajectory(dir_ + "/shared/metrics.jsonl").size(), 5u) << slurp(live.err);
  for (const auto& [spec, nproc] : {std::pair<std::string, int>{"", 0}, {"dp2", 2}}) {
    std::string log;
    steps_ = 4;
    EXPECT_EQ(run(second, "shared", spec, nproc, {}, &log), 2) << log;
    EXPECT_NE(log.find(dir_ + "/shared: in use by another partrain run (pid " + std::to_string(live.pid) + " on "),
              std::string::npos) << log;
  }
  ::kill(live.pid, SIGTERM);
  EXPECT_EQ(wait_exit(live.pid), 75) << slurp(live.err);
  // One run's steps only: trajectory() expects 1, 2, 3, ... in order, never a second run's
  // step 1 among them.
  EXPECT_GE(trajectory(dir_ + "/shared/metrics.jsonl").size(), 5u);
}

// Item 20: a start read metrics.jsonl whole (a 1 GiB file cost 1.2 GB and 12 s at every
// start; pointed at /dev/full it never ended). Now only its tail is read: a run whose
// metrics.jsonl is 1 GiB (sparse, then the real lines) resumes with its memory unchanged,
// and a metrics.jsonl that is a device is refused at once naming it.
TEST_F(FaultClasses, StartReadsOnlyTheTailOfMetrics) {
  steps_ = 4;
  const std::string j = job("big");
  std::string log;
  ASSERT_EQ(run(j, "big", "", 0, {}, &log), 0) << log;
  const std::string metrics = dir_ + "/big/metrics.jsonl";
  const std::string lines = slurp(metrics);
  fs::resize_file(metrics, 0);
  fs::resize_file(metrics, 1LL << 30);  // a GiB of NUL bytes, one "line" without a newline
  std::ofstream(metrics, std::ios::app) << "\n" << lines;
  steps_ = 8;
  Proc p = start({PARTRAIN_CLI, "run", j, "--steps", "8"},
                 {{"PARTRAIN_SITE_CONFIG", PARTRAIN_SITE_CONFIG_FILE}, {"PARTRAIN_RUN_DIR", dir_ + "/big"},
                  {"OMP_NUM_THREADS", "1"}}, dir_, "big.resume");
  int status = 0;
  struct rusage ru {};
  ASSERT_EQ(::wait4(p.pid, &status, 0, &ru), p.pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp(p.err);
  EXPECT_EQ(resumed_at(slurp(p.err) + slurp(p.out)), 4);
  std::printf("a start with a 1 GiB metrics.jsonl: peak RSS %.1f MiB\n", static_cast<double>(ru.ru_maxrss) / 1024);
  EXPECT_LT(ru.ru_maxrss, 400L * 1024) << "KiB";
  // The tail says it resumed at 4 and went on to 8.
  std::ifstream in(metrics, std::ios::binary);
  in.seekg(-4096, std::ios::end);
  std::string tail(4096, '\0');
  in.read(tail.data(), 4096);
  EXPECT_NE(tail.find("\"resumed_at_step\":4"), std::string::npos);
  EXPECT_NE(tail.find("{\"step\":8,"), std::string::npos);

  fs::create_directories(dir_ + "/dev");
  fs::create_symlink("/dev/full", dir_ + "/dev/metrics.jsonl");
  Proc d = start({PARTRAIN_CLI, "run", j, "--steps", "2"},
                 {{"PARTRAIN_SITE_CONFIG", PARTRAIN_SITE_CONFIG_FILE}, {"PARTRAIN_RUN_DIR", dir_ + "/dev"},
                  {"OMP_NUM_THREADS", "1"}}, dir_, "dev");
  EXPECT_EQ(wait_exit_within(d.pid, 60), 2) << slurp(d.err);
  EXPECT_NE(slurp(d.err).find(dir_ + "/dev/metrics.jsonl: not a regular file"), std::string::npos) << slurp(d.err);
}

// Item 24: `ckpt verify` on a live run reported a checkpoint that retention deleted while it
// was read as DAMAGED (exit 1). Against a run that commits every step and keeps one, every
// verify exits 0, never says DAMAGED, and a checkpoint dropped meanwhile is "removed by
// retention".
TEST_F(FaultClasses, VerifyOnALiveRunNeverTakesRetentionForDamage) {
  every_ = 1;
  const std::string j = job("retain", "keep = 1\n");
  Proc live = start_live(j, dir_, "retain");
  int removed = 0, runs = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20)) {
    std::string out;
    const int code = cli({"ckpt", "verify", dir_ + "/retain"}, &out);
    ++runs;
    EXPECT_EQ(code, 0) << out;
    EXPECT_EQ(out.find("DAMAGED"), std::string::npos) << out;
    if (out.find("removed by retention while it was verified") != std::string::npos) ++removed;
  }
  EXPECT_EQ(::kill(live.pid, 0), 0) << "the live run ended early: " << slurp(live.err);
  ::kill(live.pid, SIGTERM);
  EXPECT_EQ(wait_exit(live.pid), 75) << slurp(live.err);
  std::printf("ckpt verify on a live run (a commit every step, keep 1): %d runs, %d saw retention remove what they "
              "verified, none said DAMAGED\n", runs, removed);
}

// Item 26: `ckpt list` on a run that never committed printed an empty table with exit 0.
TEST_F(FaultClasses, CkptListOfARunThatNeverCommittedSaysSo) {
  steps_ = 8;
  std::string log, out;
  EXPECT_NE(run(job("none"), "none", "", 0, {{"PARTRAIN_FAULT", "after_step:2"}}, &log), 0) << log;
  ASSERT_TRUE(fs::exists(dir_ + "/none/checkpoints/state.db")) << log;
  EXPECT_EQ(cli({"ckpt", "list", dir_ + "/none"}, &out), 2) << out;
  EXPECT_NE(out.find(dir_ + "/none/checkpoints: no committed checkpoint"), std::string::npos) << out;
}

// Item 19: a full disk inside the state store aborted the process (exit 134: RocksDB's info
// LOG met the full disk and Debian's librocksdb asserted when the store closed, or an open
// on a full disk did). On a tmpfs left with a shard's size plus 16 to 200 KiB, a run's
// commit (or its shard) meets the full disk, and the next start its open: each is exit 1
// with one line naming the disk, never an assertion; with room again the run completes.
TEST_F(FaultClasses, FullDiskAtTheStateStoreIsOneLineNeverAnAbort) {
  steps_ = 2;
  every_ = 2;
  std::string log;
  // One checkpoint's size, measured on a roomy disk.
  ASSERT_EQ(run(job("roomy"), "roomy", "", 0, {}, &log), 0) << log;
  uintmax_t shard = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir_ + "/roomy/checkpoints/step-000000000002")) {
    if (e.is_regular_file()) shard += e.file_size();
  }
  const std::string mnt = dir_ + "/small";
  fs::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=12m") != 0) GTEST_SKIP() << "cannot mount a tmpfs (needs root)";
  mounted_ = mnt;
  const std::string j = job("full", "dir = \"" + mnt + "/ckpt\"\n");
  for (const uintmax_t margin_kib : {16, 48, 56, 64, 200}) {
    fs::remove_all(mnt + "/ckpt");
    fs::remove_all(dir_ + "/full");
    fs::remove(mnt + "/filler");
    struct statvfs st {};
    ASSERT_EQ(::statvfs(mnt.c_str(), &st), 0);
    const uintmax_t free = static_cast<uintmax_t>(st.f_bavail) * st.f_frsize;
    {
      std::ofstream fill(mnt + "/filler", std::ios::binary);
      const std::string zeros(free - shard - margin_kib * 1024, '\0');
      fill.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
    }
    const int code = run(j, "full", "", 0, {}, &log);
    EXPECT_EQ(code, 1) << margin_kib << " KiB: " << log;
    EXPECT_EQ(log.find("Assertion"), std::string::npos) << margin_kib << " KiB: " << log;
    EXPECT_NE(log.find("No space left on device"), std::string::npos) << margin_kib << " KiB: " << log;
    // A refused commit leaves its shard (a save that never committed): the next start finds
    // the disk as full, and its open is refused the same way.
    if (log.find("/state.db: cannot commit the checkpoint of step 2: the disk holding the state store is full") ==
        std::string::npos) {
      EXPECT_LE(margin_kib, 16u) << log;  // the shard itself met the full disk
      continue;
    }
    EXPECT_EQ(run(j, "full", "", 0, {}, &log), 1) << margin_kib << " KiB: " << log;
    EXPECT_NE(log.find(mnt + "/ckpt/state.db: cannot open it: the disk holding the state store is full"),
              std::string::npos) << margin_kib << " KiB: " << log;
    std::printf("state store on a full disk (a shard + %ju KiB free): exit %d, then exit 1 at the next open\n",
                margin_kib, code);
  }
  fs::remove(mnt + "/filler");
  ASSERT_EQ(run(j, "full", "", 0, {}, &log), 0) << log;
}

}  // namespace
