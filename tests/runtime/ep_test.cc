// Expert parallelism end to end (engine/model/expert_parallel.h, the ep plugin:
// plugins/expert/ep, worker/expert_plugin_comm.h):
// ep2 on dp2, ep4 on dp4 and ep2 on dp4 (expert-data-parallel groups of 2) train exactly
// what one rank trains on etc/examples/moe-tiny.toml (4 experts, top-2, 20 steps, 1e-5
// relative; also with dropout and full recompute, and a LLaMA MoE with SwiGLU experts):
// with a capacity that drops nothing and with one that drops tokens, the
// per-expert token counts and dropped tokens equal one rank's at every step; a checkpoint
// written on ep2 resumes on ep4; the layouts the model or the runtime cannot take are
// refused with exit 2 and the fix.
#include <cmath>
#include <cstdio>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime_helpers.h"

namespace {

using namespace partrain::testing;

constexpr int kSteps = 20;

// moe-tiny (or, for `llama`, llama-tiny given the same experts) with micro-batches of 2
// sequences (global batch 16: 8 micro-batches on one rank, 2 per rank on dp4), the given
// capacity factor and `model` (more [model] keys).
std::string moe_job(const std::string& dir, const std::string& capacity, const std::string& model = "",
                    bool llama = false) {
  const std::string path = job_copy(llama ? kLlama : kMoe, dir, "job.toml", "");
  if (llama) {
    edit_file(path, {{"[model]\n", "[model]\nmoe_experts = 4\nmoe_top_k = 2\nmoe_every = 1\n"
                                  "moe_capacity_factor = 1.25\nmoe_aux_loss_coef = 0.01\n"}});
  }
  edit_file(path, {{"micro_batch = 8", "micro_batch = 2"},
                   {"moe_capacity_factor = 1.25", "moe_capacity_factor = " + capacity + "\n" + model}});
  return path;
}

struct Case {
  const char* name;
  const char* spec;
  int nproc;
  const char* capacity;  // moe_capacity_factor
  bool drops;            // does this capacity drop tokens on one rank?
  const char* model = "";  // more [model] keys
  bool llama = false;      // llama-tiny with moe-tiny's experts instead of moe-tiny
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class EpMatchesOneRank : public Runtime, public ::testing::WithParamInterface<Case> {};

// The reference is `partrain run` on one rank (the engine's trainer, all experts local),
// trained once for all the cases with the same job.
TEST_P(EpMatchesOneRank, OverTwentySteps) {
  const Case c = GetParam();
  const std::string job = moe_job(dir_, c.capacity, c.model, c.llama);
  const ReferenceRun one = one_rank(job, kSteps);
  const std::string spec = std::string("--partrain=") + c.spec;
  Proc p = start({PARTRAIN_CLI, "run", job, spec, "--nproc", std::to_string(c.nproc), "--steps",
                  std::to_string(kSteps)}, env("ep"), dir_, "ep");
  ASSERT_EQ(wait_exit(p.pid), 0) << slurp(p.err);
  EXPECT_NE(slurp(p.err).find("expert plugin ep "), std::string::npos) << slurp(p.err);
  const std::string ref = one.metrics, got = dir_ + "/ep/metrics.jsonl";
  expect_same_losses(ref, got, kSteps, std::string(c.name) + " " + spec);
  expect_drops(expect_same_routing(ref, got, c.name), c.drops, c.capacity, std::string(c.name) + " " + spec);
  // Each rank holds the replicated parameters and its E/ep experts, by hand (moe-tiny: V 256,
  // T 64, C 128, F 512, 2 blocks of 4 experts): wte + wpe + per block (ln_1, c_attn, c_proj,
  // ln_2, router) + ln_f, and per expert c_fc + c_proj with biases.
  if (!c.llama) {
    const double replicated = 256 * 128 + 64 * 128 + 2 * (256 + (3 * 128 * 128 + 384) + (128 * 128 + 128) + 256 + 4 * 128) + 256;
    const double expert = (512 * 128 + 512) + (128 * 512 + 128);
    const int ep = c.spec[std::string(c.spec).find("ep") + 2] - '0';
    for (int r = 0; r < c.nproc; ++r) {
      const std::string m = slurp(dir_ + "/ep/memory.rank" + std::to_string(r) + ".json");
      EXPECT_EQ(field(m, "weights"), 4 * (replicated + 2 * 4 * expert / ep)) << c.name << " rank " << r;
      EXPECT_EQ(field(m, "optimizer"), 8 * (replicated + 2 * 4 * expert / ep)) << c.name << " rank " << r;
    }
  }
  // The ep collectives are reported; one rank's counts are printed too.
  EXPECT_FALSE(column(got, "ep_comm_ms").front().empty()) << slurp(got);
  EXPECT_NE(slurp(one.out).find("dropped"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, EpMatchesOneRank,
    ::testing::Values(Case{"ep2_dp2", "dp2,ep2", 2, "2.0", false},
                      Case{"ep2_dp2_dropping", "dp2,ep2", 2, "1.0", true},
                      Case{"ep4_dp4", "dp4,ep4", 4, "2.0", false},
                      Case{"ep4_dp4_dropping", "dp4,ep4", 4, "1.0", true},
                      Case{"ep2_dp4", "dp4,ep2", 4, "2.0", false},
                      Case{"ep2_dp4_dropping", "dp4,ep2", 4, "1.0", true},
                      Case{"ep2_dp4_dropout_full_recompute", "dp4,ep2", 4, "1.0", true,
                           "dropout = 0.1\nrecompute = \"full\""},
                      Case{"llama_ep2_dp2_dropping", "dp2,ep2", 2, "1.0", true, "", true}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// Expert shards are saved under their logical names: 10 steps on ep2 x dp2 (each rank
// writes its experts), then the same run continues on ep4 x dp4 to step 20, equal to one
// rank's 20 steps.
TEST_F(Runtime, EpCheckpointResumesOnAnotherEp) {
  const std::string job = moe_job(dir_, "1.0");
  schedule_over(job, kSteps);
  const ReferenceRun one = one_rank(job, kSteps);
  Proc a = start({PARTRAIN_CLI, "run", job, "--partrain=dp2,ep2", "--nproc", "2", "--steps", "10"},
                 env("ep"), dir_, "ep2");
  ASSERT_EQ(wait_exit(a.pid), 0) << slurp(a.err);
  Proc b = start({PARTRAIN_CLI, "run", job, "--partrain=dp4,ep4", "--nproc", "4", "--steps",
                  std::to_string(kSteps)}, env("ep"), dir_, "ep4");
  ASSERT_EQ(wait_exit(b.pid), 0) << slurp(b.err);
  EXPECT_NE(slurp(b.err).find("resuming at step 10"), std::string::npos) << slurp(b.err);
  expect_same_losses(one.metrics, dir_ + "/ep/metrics.jsonl", kSteps, "ep2 -> ep4 resume");
  expect_same_routing(one.metrics, dir_ + "/ep/metrics.jsonl", "ep2 -> ep4 resume");
}

// Layouts refused with exit 2 and a message naming the fix, by the layout core (experts %
// ep, ep not dividing dp, ep on a dense model) before any worker starts. (ep with pp runs:
// ep_pp_test.cc; with tp, ZeRO and ZB-H1: compose_test.cc.)
TEST_F(Runtime, BadEpLayoutsAreRefused) {
  struct Bad {
    std::string spec, nproc, global_batch, says;
    bool dense;
  };
  const std::vector<Bad> bad = {
      {"dp3,ep3", "3", "24", "ep3 does not divide the model's 4 experts; use an ep from 1, 2, 4", false},
      {"dp3,ep2", "3", "24", "ep2 does not divide dp3 (experts are sharded inside each data-parallel "
                             "group); use an ep that divides 3", false},
      {"dp2,ep2", "2", "16", "ep2 shards experts, but the model has none; drop ep2", true},
  };
  for (const Bad& b : bad) {
    std::string job = moe_job(dir_, "1.0");
    std::string text = slurp(job);
    text.replace(text.find("global_batch = 16"), 17, "global_batch = " + b.global_batch);
    if (b.dense) text.replace(text.find("moe_experts = 4"), 15, "moe_experts = 0");
    std::ofstream(job) << text;
    Proc p = start({PARTRAIN_CLI, "run", job, "--partrain=" + b.spec, "--nproc", b.nproc, "--steps", "2"},
                   env("bad"), dir_, "bad");
    EXPECT_EQ(wait_exit(p.pid), 2) << b.spec;
    EXPECT_NE(slurp(p.err).find(b.says), std::string::npos) << b.spec << ": " << slurp(p.err);
  }
}

}  // namespace
