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

}  // namespace
