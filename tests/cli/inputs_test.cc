// Every file a user names, through the real `partrain` command (issue 22, defects 6 and
// 8-11): a FIFO given as any input is refused at once (it used to block the reader
// forever), a device or an endless host list is refused before it fills memory, a folder
// as a train file is a usage error, a token shard cut while the run reads it ends the run
// with a line naming the file (it used to die of SIGBUS), a model that does not fit exits
// 2 pointing at `partrain plan` (it used to exit 75, which Slurm requeues forever), and the
// small ones: --params nan, ckpt verify --step -5. Each command must end within its bound:
// a hang is a failure (wait_exit_within).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using partrain::testing::Proc;
using partrain::testing::slurp;
using partrain::testing::start;
using partrain::testing::wait_exit_within;

class Inputs : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(::mkfifo(fifo_.c_str(), 0644), 0); }

  // The demo job with its data at `data` (default: the shipped shard), `edit` replacing text.
  std::string job(const std::string& name, const std::string& data = "",
                  const std::pair<std::string, std::string>& edit = {}) {
    std::string text = slurp(std::string(PARTRAIN_SOURCE_DIR) + "/etc/examples/tiny.toml");
    const std::string from = "\"data/licenses_train.bin\"";
    text.replace(text.find(from), from.size(),
                 "\"" + (data.empty() ? std::string(PARTRAIN_SOURCE_DIR) + "/etc/examples/data/licenses_train.bin"
                                      : data) + "\"");
    // The other shipped files it names (the validation shard) from the source tree.
    text = std::regex_replace(text, std::regex("\"data/"), "\"" + std::string(PARTRAIN_SOURCE_DIR) + "/etc/examples/data/");
    if (!edit.first.empty()) text.replace(text.find(edit.first), edit.first.size(), edit.second);
    const std::string path = dir_ + "/" + name + ".toml";
    std::ofstream(path) << text;
    return path;
  }
  // `partrain ARGS...` with `env`; its exit code (-1: still running after `seconds`, killed).
  int cli(const std::vector<std::string>& args, std::string* out, double seconds = 60,
          std::map<std::string, std::string> env = {}) {
    std::vector<std::string> argv{PARTRAIN_CLI};
    argv.insert(argv.end(), args.begin(), args.end());
    env["PARTRAIN_SITE_CONFIG"] = PARTRAIN_SITE_CONFIG_FILE;
    env["PARTRAIN_RUN_DIR"] = dir_ + "/run" + std::to_string(++runs_);
    env["OMP_NUM_THREADS"] = "1";
    Proc p = start(argv, env, dir_, "cli" + std::to_string(runs_));
    const int code = wait_exit_within(p.pid, seconds);
    *out = slurp(p.out) + slurp(p.err);
    return code;
  }

  const partrain::testing::ScratchDir scratch_{"partrain_inputs"};
  const std::string dir_ = scratch_.path().string();
  const std::string fifo_ = dir_ + "/pipe";
  int runs_ = 0;
};

// Defect 9: open(2) on a FIFO blocked before any regular-file check.
TEST_F(Inputs, FifoGivenAsAnyInputIsRefusedAtOnce) {
  std::string out;
  const std::string fifo_kind = "is a FIFO (named pipe)";
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"data inspect", {"data", "inspect", fifo_}},
      {"run (job file)", {"run", fifo_}},
      {"run (train file)", {"run", job("fifo_data", fifo_), "--steps", "1"}},
      {"run --init", {"run", job("init"), "--steps", "1", "--init", fifo_}},
      {"export --from", {"export", job("exp"), "--from", fifo_, "-o", dir_ + "/x.safetensors"}},
      {"layout --topology",
       {"layout", "--partrain=dp2", "--nodes", "2", "--gpus-per-node", "1", "--topology", fifo_}},
      {"trace merge", {"trace", "merge", fifo_, "-o", dir_ + "/t.json"}},
      {"data encode", {"data", "encode", "--bytes", fifo_, "-o", dir_ + "/t.bin"}},
  };
  for (const auto& [what, args] : cases) {
    EXPECT_EQ(cli(args, &out, 20), 2) << what << ": " << out;
    EXPECT_NE(out.find(fifo_ + ": " + fifo_kind), std::string::npos) << what << ": " << out;
  }
}

// Defect 10: `layout --topology /dev/zero` and a long --nodelist ended in bad_alloc.
TEST_F(Inputs, EndlessFilesAndHostListsAreRefusedBeforeTheyFillMemory) {
  std::string out;
  const std::vector<std::string> layout{"layout", "--partrain=dp2", "--nodes", "2", "--gpus-per-node", "1"};
  std::vector<std::string> args = layout;
  args.insert(args.end(), {"--topology", "/dev/zero"});
  EXPECT_EQ(cli(args, &out, 20), 2) << out;
  EXPECT_NE(out.find("/dev/zero: is a character device, not a topology file"), std::string::npos) << out;
  // 130 ranges of a million names each: each range alone is under the cap, the list is not.
  std::string nodelist;
  for (int i = 0; i < 130; ++i) nodelist += (i ? "," : "") + std::string("r") + std::to_string(i) + "n[1-999999]";
  args = layout;
  args.insert(args.end(), {"--nodelist", nodelist});
  EXPECT_EQ(cli(args, &out, 60), 2) << out.substr(0, 2000);
  EXPECT_NE(out.find("expands to too many names"), std::string::npos) << out.substr(0, 2000);
  EXPECT_EQ(out.find("internal error"), std::string::npos);
  // One range of a million names with a long literal: bounded in bytes too.
  args = layout;
  args.insert(args.end(), {"--nodelist", "n[1-999999]" + std::string(100000, 'x')});
  EXPECT_EQ(cli(args, &out, 60), 2) << out.substr(0, 2000);
  EXPECT_NE(out.find("expands to too many names"), std::string::npos) << out.substr(0, 2000);
}

// Defect 11: a folder as a train file exited 1 (the man page says 2).
TEST_F(Inputs, FolderAsATrainFileIsAUsageError) {
  std::string out;
  fs::create_directories(dir_ + "/shards");
  EXPECT_EQ(cli({"run", job("folder", dir_ + "/shards"), "--steps", "1"}, &out), 2) << out;
  EXPECT_NE(out.find(dir_ + "/shards: is a folder, not a token shard"), std::string::npos) << out;
  EXPECT_EQ(cli({"data", "inspect", dir_ + "/shards"}, &out), 2) << out;
}

// Defect 11: `--params nan` printed bare nan in --json; inf is no count either.
TEST_F(Inputs, NonFiniteCostModelSizesAreRefused) {
  std::string out;
  for (const char* v : {"nan", "inf", "-1"}) {
    EXPECT_EQ(cli({"layout", "--partrain=dp2", "--nodes", "2", "--gpus-per-node", "1", "--params", v, "--json"}, &out,
                  20), 2) << v << ": " << out;
    EXPECT_NE(out.find("must be positive finite numbers"), std::string::npos) << out;
    EXPECT_EQ(out.find("nan,"), std::string::npos) << out;
  }
}

// Defect 11: `ckpt verify --step -5` verified everything and exited 0.
TEST_F(Inputs, NegativeCheckpointStepIsAUsageError) {
  std::string out;
  EXPECT_EQ(cli({"ckpt", "verify", dir_, "--step", "-5"}, &out, 20), 2) << out;
  EXPECT_EQ(cli({"ckpt", "export", dir_, "--job", job("j"), "-o", dir_ + "/o.safetensors", "--step", "-5"}, &out, 20),
            2) << out;
  EXPECT_NE(out.find("--step: must be 0 or a number above it, not -5"), std::string::npos) << out;
}

// A number option out of range is refused in words, in one short line (CLI11's own check
// printed its range up to the largest double: a 300-digit number).
TEST_F(Inputs, NumberOptionsAreRefusedInWords) {
  std::string out;
  for (const char* v : {"0", "-3", "nan"}) {
    EXPECT_EQ(cli({"run", job("j"), "--steps", v}, &out, 20), 2) << v << ": " << out;
    EXPECT_NE(out.find(std::string("--steps: must be a number above 0, not ") + v), std::string::npos) << out;
    EXPECT_LT(out.size(), 200u) << out;
  }
}

// Defect 8: a memory-mapped shard cut during the run killed it with SIGBUS (exit 135, no
// message). Now: exit 2 with a line naming the file, on one rank and on dp2.
TEST_F(Inputs, ShardCutDuringTheRunEndsItWithTheFileNamed) {
  for (int nproc : {0, 2}) {
    const std::string shard = dir_ + "/cut" + std::to_string(nproc) + ".bin";
    fs::copy_file(std::string(PARTRAIN_SOURCE_DIR) + "/etc/examples/data/licenses_train.bin", shard);
    const std::string j = job("cut" + std::to_string(nproc), shard);
    const std::string run = dir_ + "/cutrun" + std::to_string(nproc);
    std::vector<std::string> argv{PARTRAIN_CLI, "run", j, "--steps", "100000"};
    if (nproc > 0) argv.insert(argv.end(), {"--partrain=dp2", "--nproc", "2"});
    Proc p = start(argv, {{"PARTRAIN_SITE_CONFIG", PARTRAIN_SITE_CONFIG_FILE}, {"PARTRAIN_RUN_DIR", run},
                          {"OMP_NUM_THREADS", "1"}}, dir_, "cut" + std::to_string(nproc));
    // Once two steps are logged, cut the shard to a tenth: almost every window is gone.
    const auto t0 = std::chrono::steady_clock::now();
    const auto lines = [&run] {
      const std::string text = slurp(run + "/metrics.jsonl");
      return std::count(text.begin(), text.end(), '\n');
    };
    while (lines() < 2 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    fs::resize_file(shard, fs::file_size(shard) / 10);
    const int code = wait_exit_within(p.pid, 120);
    const std::string log = slurp(p.err) + slurp(p.out);
    EXPECT_EQ(code, 2) << "nproc " << nproc << ": " << log;
    EXPECT_NE(log.find(shard + ": truncated while the run reads it"), std::string::npos) << log;
  }
}

// Defect 6: a model that does not fit exited 75 (retryable), so Slurm requeued it forever.
// The address space is capped (ulimit -v) so the refusal is certain and nothing else on the
// machine feels it; the weights alone need 6 GiB (1.6e9 parameters).
TEST_F(Inputs, ModelThatDoesNotFitIsAConfigurationError) {
  const std::string big = job("big", "", {"hidden = 128", "hidden = 8192\nffn_hidden = 32768"});
  for (int nproc : {0, 2}) {
    std::string cmd = "ulimit -v 3000000; exec " + std::string(PARTRAIN_CLI) + " run " + big + " --steps 1";
    if (nproc > 0) cmd += " --partrain=dp2 --nproc 2";
    Proc p = start({"/bin/sh", "-c", cmd}, {{"PARTRAIN_SITE_CONFIG", PARTRAIN_SITE_CONFIG_FILE},
                                            {"PARTRAIN_RUN_DIR", dir_ + "/big" + std::to_string(nproc)},
                                            {"OMP_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"}},
                   dir_, "big" + std::to_string(nproc));
    const int code = wait_exit_within(p.pid, 120);
    const std::string log = slurp(p.err) + slurp(p.out);
    EXPECT_EQ(code, 2) << "nproc " << nproc << ": " << log;
    EXPECT_NE(log.find("does not fit"), std::string::npos) << log;
    EXPECT_NE(log.find("partrain plan"), std::string::npos) << log;
  }
}

}  // namespace
