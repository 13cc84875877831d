// Context parallelism end to end (engine/model/context_parallel.h, the context plugins
// plugins/context/ring and plugins/context/allgather, worker/context_plugin_comm.h): cp2 and
// cp4 with each plugin, cp2 x tp2, cp2 x dp2 x zero1, cp2 x pp2 (1F1B), cp2 on LLaMA (GQA,
// RoPE), cp2 with dropout and cp2 x dp2 x ep2 on the MoE example train exactly what one rank
// trains (20 steps, 1e-5 relative; MoE routing counts exactly); the step's K/V transfers
// are in metrics.jsonl (cp_comm_ms, cp_exposed_ms); a cp4 checkpoint resumes on one rank
// and back on cp4; a layout the model cannot take is refused before any worker starts.
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime_helpers.h"

namespace {

using namespace partrain::testing_runtime;

const std::string kLlama = std::string(PARTRAIN_SOURCE_DIR) + "/etc/examples/llama-tiny.toml";
const std::string kMoe = std::string(PARTRAIN_SOURCE_DIR) + "/etc/examples/moe-tiny.toml";
constexpr int kSteps = 20;

struct Case {
  const char* name;    // test name suffix
  const char* job;     // "gpt2", "llama" or "moe"
  const char* spec;    // --partrain
  int nproc;
  const char* edits;   // appended to [model] (moe: replaces its capacity line), or ""
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// A copy of the example with the case's edits of its [model] table.
std::string job_for(const Case& c, const std::string& dir) {
  const std::string name = c.job;
  const std::string path = job_copy(name == "llama" ? kLlama : name == "moe" ? kMoe : kTiny, dir, "job.toml", "");
  if (name == "moe") {
    if (*c.edits != '\0') edit_file(path, {{"moe_capacity_factor = 1.25", c.edits}});
    return path;
  }
  if (name == "gpt2") edit_file(path, {{"dropout = 0.0\n", ""}});  // the case says its own
  if (*c.edits != '\0') edit_file(path, {{"[model]\n", "[model]\n" + std::string(c.edits) + "\n"}});
  return path;
}

class CpMatchesOneRank : public Runtime, public ::testing::WithParamInterface<Case> {};

// The reference is `partrain run` on one rank (the engine's trainer, whole sequences).
TEST_P(CpMatchesOneRank, OverTwentySteps) {
  const Case c = GetParam();
  const std::string job = job_for(c, dir_);
  Proc one = start({PARTRAIN_CLI, "run", job, "--steps", std::to_string(kSteps)}, env("one"), dir_, "one");
  ASSERT_EQ(wait_exit(one.pid), 0) << slurp(one.err);
  const std::string spec = std::string("--partrain=") + c.spec;
  Proc p = start({PARTRAIN_CLI, "run", job, spec, "--nproc", std::to_string(c.nproc), "--steps",
                  std::to_string(kSteps)}, env("cp"), dir_, "cp");
  ASSERT_EQ(wait_exit(p.pid), 0) << slurp(p.err);
  const std::string plugin = std::string(c.spec).find("cpimpl=allgather") != std::string::npos ? "allgather" : "ring";
  EXPECT_NE(slurp(p.err).find("context plugin " + plugin + " "), std::string::npos) << slurp(p.err);
  const std::string ref = dir_ + "/one/metrics.jsonl", got = dir_ + "/cp/metrics.jsonl";
  expect_same_losses(ref, got, kSteps, std::string(c.name) + " " + spec);
  if (std::string(c.job) == "moe") {
    const long long dropped = expect_same_routing(ref, got, c.name);
    std::printf("%s: %lld tokens dropped over %d steps, on one rank and on %s\n", c.name, dropped, kSteps, c.spec);
    EXPECT_GT(dropped, 0) << "the capacity should drop tokens: routed over the whole micro-batch, as one rank";
  }
  // The K/V transfers are counted per step, on the cp axis.
  const std::vector<std::string> comm = column(got, "cp_comm_ms"), exposed = column(got, "cp_exposed_ms");
  ASSERT_EQ(comm.size(), static_cast<size_t>(kSteps));
  for (int s = 0; s < kSteps; ++s) {
    ASSERT_FALSE(comm[static_cast<size_t>(s)].empty()) << "step " << s + 1;
    EXPECT_GE(std::stod(comm[static_cast<size_t>(s)]), std::stod(exposed[static_cast<size_t>(s)]));
  }
  EXPECT_NE(slurp(got).find("\"cp\":"), std::string::npos);
}

constexpr const char* kDrop = "dropout = 0.1";

INSTANTIATE_TEST_SUITE_P(
    Layouts, CpMatchesOneRank,
    ::testing::Values(Case{"gpt2_cp2_ring", "gpt2", "cp2", 2, ""},
                      Case{"gpt2_cp2_allgather", "gpt2", "cp2,cpimpl=allgather", 2, ""},
                      Case{"gpt2_cp4_ring", "gpt2", "cp4", 4, ""},
                      Case{"gpt2_cp4_allgather", "gpt2", "cp4,cpimpl=allgather", 4, ""},
                      Case{"gpt2_cp2_tp2", "gpt2", "cp2,tp2", 4, ""},
                      Case{"gpt2_cp2_dp2_zero1", "gpt2", "cp2,dp2,zero1", 4, ""},
                      Case{"gpt2_cp2_pp2_1f1b", "gpt2", "cp2,pp2,sched=1f1b", 4, ""},
                      Case{"llama_cp2_gqa_rope", "llama", "cp2", 2, ""},
                      Case{"gpt2_cp2_dropout", "gpt2", "cp2", 2, kDrop},
                      Case{"moe_cp2_dp2_ep2", "moe", "cp2,dp2,ep2", 4, "moe_capacity_factor = 1.0"}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// cp does not change what is saved: a checkpoint written on cp4 resumes on one rank, and
// that one's resumes on cp4 again, on one rank's trajectory.
TEST_F(Runtime, CpCheckpointResumesOnOneRankAndBack) {
  const std::string job = job_copy(kTiny, dir_, "job.toml", "");
  Proc one = start({PARTRAIN_CLI, "run", job, "--steps", std::to_string(kSteps)}, env("one"), dir_, "one");
  ASSERT_EQ(wait_exit(one.pid), 0) << slurp(one.err);
  Proc a = start({PARTRAIN_CLI, "run", job, "--partrain=cp4", "--nproc", "4", "--steps", "8"}, env("cp"), dir_, "a");
  ASSERT_EQ(wait_exit(a.pid), 0) << slurp(a.err);
  Proc b = start({PARTRAIN_CLI, "run", job, "--partrain=dp1", "--nproc", "1", "--steps", "14"}, env("cp"), dir_, "b");
  ASSERT_EQ(wait_exit(b.pid), 0) << slurp(b.err);
  EXPECT_NE(slurp(b.err).find("resuming at step 8"), std::string::npos) << slurp(b.err);
  Proc c = start({PARTRAIN_CLI, "run", job, "--partrain=cp4", "--nproc", "4", "--steps", std::to_string(kSteps)},
                 env("cp"), dir_, "c");
  ASSERT_EQ(wait_exit(c.pid), 0) << slurp(c.err);
  EXPECT_NE(slurp(c.err).find("resuming at step 14"), std::string::npos) << slurp(c.err);
  expect_same_losses(dir_ + "/one/metrics.jsonl", dir_ + "/cp/metrics.jsonl", kSteps, "cp4 -> one rank -> cp4");
}

// Refused before any worker starts, exit 2, one line with the fix: a seq_len that does not
// cut into 2cp chunks (the layout core), cp x tp whose chunks do not split over tp under
// sp, cp on GPU ranks (config::check_supported); a context plugin that is not installed
// and a key its table does not take are configuration errors too.
TEST_F(Runtime, BadCpLayoutsAreRefused) {
  struct Bad {
    std::string spec, nproc, seq_len, says, table;
    bool before_workers, cuda;
  };
  const std::vector<Bad> bad = {
      {"cp3", "3", "64", "cp3 cuts every sequence into 6 chunks, which do not divide seq_len 64; use a seq_len "
                         "that is a multiple of 6", "", true, false},
      {"cp2,tp4", "8", "68", "sequence parallelism splits each cp rank's 34 of seq_len 68 over tp4, which does "
                             "not divide it; use a seq_len that is a multiple of 2 x cp2 x tp4 = 16, or nosp", "",
       true, false},
      {"cp2", "2", "64", "context parallelism runs on CPU ranks in this version; use --device cpu, or drop cp2",
       "", true, true},
      {"cp2,cpimpl=ulysses", "2", "64", "ulysses.so", "", false, false},
      {"cp2", "2", "64", "[plugins.ring]: unknown key 'chunks'; this plugin takes no keys: remove it",
       "[plugins.ring]\nchunks = 4\n", false, false},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.spec);
    const std::string job = job_copy(kTiny, dir_, "bad.toml", b.table);
    edit_file(job, {{"seq_len = 64", "seq_len = " + b.seq_len}});
    std::vector<std::string> args = {PARTRAIN_CLI, "run", job, "--partrain=" + b.spec, "--nproc", b.nproc,
                                     "--steps", "2"};
    std::map<std::string, std::string> e = env("bad");
    if (b.cuda) {  // GPUs named, need not exist: refused before CUDA is touched
      args.insert(args.end(), {"--device", "cuda"});
      e["CUDA_VISIBLE_DEVICES"] = "0,1";
    }
    Proc p = start(args, e, dir_, "bad");
    EXPECT_EQ(wait_exit(p.pid), 2);
    const std::string err = slurp(p.err);
    EXPECT_NE(err.find(b.says), std::string::npos) << err;
    if (b.before_workers) {
      EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
      EXPECT_EQ(err.find("started"), std::string::npos) << err;
    }
  }
}

}  // namespace
