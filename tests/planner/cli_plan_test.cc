// `partrain plan` as a user runs it: text and --json agree with the library's plan, --search
// ranks fastest first, --auto chooses a layout that fits (and no slower than its runner-up),
// --explain says why the others lost, and bad input of each kind (unknown profile, bad spec, impossible
// layout, bad cluster size, broken profile file) is one line on stderr with exit code 2.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "test_util.h"

#if !defined(PARTRAIN_CLI) || !defined(PARTRAIN_SOURCE_DIR)
#error "PARTRAIN_CLI and PARTRAIN_SOURCE_DIR must be defined"
#endif

namespace {

using partrain::engine::io::JsonValue;
using namespace partrain::planner::testing;

struct Outcome {
  int rc = -1;
  std::string out, err;
};

const std::string kSource = PARTRAIN_SOURCE_DIR;
const std::string kTiny = kSource + "/etc/examples/tiny.toml";

Outcome plan(const std::string& args) {
  // CTest runs this binary's tests as parallel processes: name the files per process.
  const std::string tag = ::testing::TempDir() + "partrain_plan_cli." + std::to_string(::getpid());
  Outcome r;
  r.rc = sh(std::string("'") + PARTRAIN_CLI + "' plan " + args + " --hardware-dir '" + kSource +
                "/etc/hardware'",
            tag + ".out", tag + ".err");
  r.out = slurp(tag + ".out");
  r.err = slurp(tag + ".err");
  std::remove((tag + ".out").c_str());
  std::remove((tag + ".err").c_str());
  return r;
}

void expect_one_line_usage_error(const Outcome& r, const std::string& mention) {
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "more than one line:\n" << r.err;
  EXPECT_NE(r.err.find(mention), std::string::npos) << r.err;
}

TEST(PlannerCli, JsonHasEveryFigureAndTheGlobalBatch) {
  const Outcome r = plan("'" + kTiny + "' --hardware cpu --partrain=dp2 --gpus-per-node 2 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  partrain::Result<JsonValue> j = partrain::engine::io::parse_json(r.out);
  ASSERT_TRUE(j.is_ok()) << j.status().message() << "\n" << r.out;
  EXPECT_EQ(at(*j, "global_batch").text, "16");  // 8 x 1 x dp 2
  EXPECT_EQ(at(*j, "grad_accum").text, "1");
  EXPECT_EQ(at(*j, "dp").text, "2");
  // tiny.toml's 437760 parameters in fp32: 1751040 bytes of weights on each rank.
  EXPECT_EQ(at(at(*j, "memory"), "weights").text, "1751040");
  EXPECT_EQ(at(at(*j, "memory"), "fits").kind, JsonValue::Kind::kBool);
  // The DP all-reduce of 1751040 bytes between 2 ranks: 2 (n-1)/n S on each of 2 ring edges.
  EXPECT_EQ(at(at(at(*j, "traffic"), "dp"), "total").text, "3502080");
  for (const char* key : {"compute", "dp", "dp_exposed", "bubble", "optimizer", "step",
                          "tokens_per_s", "tokens_per_s_per_gpu", "mfu"}) {
    EXPECT_NO_FATAL_FAILURE(at(at(*j, "time"), key)) << key;
  }
}

TEST(PlannerCli, TextShowsTheBreakdownAndTheVerdict) {
  const Outcome r = plan("'" + kTiny + "' --hardware H100-SXM --partrain=tp2,pp2 --gpus-per-node 4");
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* want : {"weights", "gradients", "optimizer state", "activations", "workspace",
                           "comm buffers", "fragmentation margin", "fits", "global batch 16",
                           "pipeline bubble", "intra-node", "tokens/s/GPU", "MFU",
                           "per pipeline stage", "stage 0: block 0 + embedding",
                           "stage 1: block 1 + head (tied copy)"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << " missing in\n" << r.out;
  }
}

// pp2: one memory object per stage, and the top-level figures are the stage that needs most.
TEST(PlannerCli, JsonHasEveryPipelineStage) {
  const Outcome r = plan("'" + kTiny + "' --hardware cpu --partrain=pp2,sched=gpipe --gpus-per-node 2 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  partrain::Result<JsonValue> j = partrain::engine::io::parse_json(r.out);
  ASSERT_TRUE(j.is_ok()) << j.status().message() << "\n" << r.out;
  const JsonValue& mem = at(*j, "memory");
  const JsonValue& stages = at(mem, "stages");
  ASSERT_EQ(stages.items.size(), 2u);
  double most = 0;
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_EQ(number(stages.items[s], "stage"), static_cast<double>(s));
    EXPECT_EQ(number(stages.items[s], "in_flight_micro_batches"), 2);  // GPipe: m = 16 / 8
    most = std::max(most, number(stages.items[s], "total"));
  }
  EXPECT_EQ(number(mem, "total"), most);
  EXPECT_EQ(number(stages.items[static_cast<size_t>(number(mem, "stage"))], "total"), most);
}

TEST(PlannerCli, SearchRanksFastestFirst) {
  const Outcome r = plan("'" + kTiny + "' --hardware A100-80GB --nodes 2 --search --top 3 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  partrain::Result<JsonValue> j = partrain::engine::io::parse_json(r.out);
  ASSERT_TRUE(j.is_ok()) << j.status().message();
  const JsonValue& top = at(*j, "top");
  ASSERT_EQ(top.items.size(), 3u);
  double last = 1e300;
  for (const JsonValue& entry : top.items) {
    const double tps = std::stod(at(at(at(entry, "plan"), "time"), "tokens_per_s").text);
    EXPECT_LE(tps, last);
    last = tps;
    EXPECT_FALSE(at(entry, "why").text.empty());
  }
}

// A 1.1B llama: 16 bytes per parameter are 18 GB, more than a 12 GiB CPU rank holds, so
// plain dp2 cannot run it and --partrain=auto must shard it (ZeRO, tp or pp).
std::string billion_job() {
  const std::string path = ::testing::TempDir() + "billion." + std::to_string(::getpid()) + ".toml";
  std::ofstream(path) << "[job]\nname = \"billion\"\n[model]\narch = \"llama\"\nvocab_size = 32000\n"
                         "seq_len = 512\nlayers = 20\nhidden = 2048\nheads = 16\n[data]\n"
                         "train_files = [\"x.bin\"]\n[training]\nglobal_batch = 8\nmicro_batch = 2\n";
  return path;
}

TEST(PlannerCli, AutoChoosesAFittingLayoutAtLeastAsFastAsItsRunnerUp) {
  const std::string job = billion_job();
  const Outcome r = plan("'" + job + "' --hardware cpu --gpus-per-node 2 --auto --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  partrain::Result<JsonValue> j = partrain::engine::io::parse_json(r.out);
  ASSERT_TRUE(j.is_ok()) << j.status().message() << "\n" << r.out;
  const std::string spec = at(*j, "spec").text, runner = at(*j, "runner_up").text;
  EXPECT_EQ(at(at(at(*j, "plan"), "memory"), "fits").boolean, true);
  // Not plain data parallelism: it does not fit.
  EXPECT_FALSE(spec.find("tp1,pp1,dp2,zero0") != std::string::npos) << spec;
  const Outcome plain = plan("'" + job + "' --hardware cpu --gpus-per-node 2 --partrain=dp2 --json");
  ASSERT_EQ(plain.rc, 0) << plain.err;
  EXPECT_EQ(at(at(*partrain::engine::io::parse_json(plain.out), "memory"), "fits").boolean, false);
  // The runner-up, planned on its own, is no faster than the choice.
  ASSERT_FALSE(runner.empty());
  const Outcome second = plan("'" + job + "' --hardware cpu --gpus-per-node 2 --partrain=" + runner + " --json");
  ASSERT_EQ(second.rc, 0) << second.err;
  EXPECT_LE(number(*partrain::engine::io::parse_json(second.out), "time.tokens_per_s"),
            number(at(*j, "plan"), "time.tokens_per_s"));
  // The text form says both, with their step time and memory.
  const Outcome text = plan("'" + job + "' --hardware cpu --gpus-per-node 2 --auto");
  ASSERT_EQ(text.rc, 0) << text.err;
  EXPECT_NE(text.out.find("partrain: --partrain=auto chose --partrain=" + spec + ": predicted"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("partrain: runner-up --partrain=" + runner), std::string::npos) << text.out;
  std::remove(job.c_str());
}

TEST(PlannerCli, ExplainSaysWhyEachRejectedLayoutLost) {
  const std::string job = billion_job();
  const Outcome r = plan("'" + job + "' --hardware cpu --gpus-per-node 2 --explain --top 3");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("\nchosen: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("lost on time"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("% slower: "), std::string::npos) << r.out;
  // Plain dp2 would be faster on paper and does not fit: said so, with its memory.
  EXPECT_NE(r.out.find("faster on paper, rejected:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GiB per device of 12.0"), std::string::npos) << r.out;
  std::remove(job.c_str());
}

TEST(PlannerCli, BadInputIsOneLineAndExitTwo) {
  expect_one_line_usage_error(plan("'" + kTiny + "' --hardware B300"), "H100-SXM");
  expect_one_line_usage_error(plan("'" + kTiny + "' --hardware cpu --partrain=tpx"), "tpx");
  // tiny.toml has 4 heads: tp3 cannot split them.
  expect_one_line_usage_error(plan("'" + kTiny + "' --hardware A100-80GB --partrain=tp3 --gpus-per-node 3"),
                              "heads");
  expect_one_line_usage_error(plan("'" + kTiny + "' --hardware cpu --nodes 0"), "--nodes");
  const std::string broken = ::testing::TempDir() + "broken-profile.toml";
  std::ofstream(broken) << "[device]\nname = \"x\"\n[compute]\npek_fp32_flops = 1\n";
  expect_one_line_usage_error(plan("'" + kTiny + "' --hardware '" + broken + "'"), "pek_fp32_flops");
  std::remove(broken.c_str());
  const Outcome missing = plan("--hardware cpu");
  EXPECT_EQ(missing.rc, 2);
}

TEST(PlannerCli, HelpDescribesEveryOption) {
  const Outcome r = plan("--help");
  ASSERT_EQ(r.rc, 0);
  for (const char* opt : {"--partrain", "--nodes", "--gpus-per-node", "--hardware", "--json",
                          "--search", "--top", "--hardware-dir", "--explain", "--auto"}) {
    EXPECT_NE(r.out.find(opt), std::string::npos) << opt;
  }
}

}  // namespace
