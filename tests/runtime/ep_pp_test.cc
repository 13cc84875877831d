// Expert parallelism inside pipeline stages (ep x pp x dp: worker/pipeline_executor with the
// ep plugin on each stage's ep group): ep2 x pp2 on dp4 (8 ranks, expert-data-parallel
// groups of 2) with 1F1B, ep2 x pp2 on dp2 with GPipe, ZB-H1 and interleaved 1F1B (v = 2),
// and ep4 x pp2 on dp4 train exactly what one rank trains on etc/examples/moe-tiny.toml
// (4 experts, top-2, micro-batches of 2, 20 steps; also a LLaMA MoE on ep2 x pp2 x dp4): the loss, the clipped norm and the aux
// loss within 1e-5 relative, the per-block expert token counts (every stage's blocks, in
// global block order) and the dropped tokens exactly, with a capacity that drops tokens
// and one that drops none. A checkpoint written on ep2 x pp2 x dp4 resumes on one rank,
// that one on ep2 x pp2 interleaved, that one on pp2 x dp2, and the whole run equals one
// rank's.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime_helpers.h"

namespace {

using namespace partrain::testing;

constexpr int kSteps = 20;

// moe-tiny (or, for `llama`, llama-tiny given the same experts: SwiGLU experts, untied head)
// with `layers` blocks (all MoE), micro-batches of 2 sequences (global batch 16), the given
// capacity factor, and `extra` TOML appended.
std::string moe_pp_job(const std::string& dir, int layers, const std::string& capacity,
                       const std::string& extra = "", bool llama = false) {
  const std::string path = job_copy(llama ? kLlama : kMoe, dir, "job.toml", extra);
  if (llama) {
    edit_file(path, {{"[model]\n", "[model]\nmoe_experts = 4\nmoe_top_k = 2\nmoe_every = 1\n"
                                  "moe_capacity_factor = 1.25\nmoe_aux_loss_coef = 0.01\n"}});
  }
  edit_file(path, {{"layers = 2", "layers = " + std::to_string(layers)},
                   {"micro_batch = 8", "micro_batch = 2"},
                   {"moe_capacity_factor = 1.25", "moe_capacity_factor = " + capacity}});
  return path;
}

struct Case {
  const char* name;
  const char* spec;
  int nproc;
  int layers;
  int ep;
  const char* capacity;  // moe_capacity_factor
  bool drops;            // does this capacity drop tokens on one rank?
  bool llama = false;    // llama-tiny with moe-tiny's experts instead of moe-tiny
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class EpPpMatchesOneRank : public Runtime, public ::testing::WithParamInterface<Case> {};

// The reference is `partrain run` on one rank (the engine's trainer, every expert local),
// trained once for all the cases with the same job.
TEST_P(EpPpMatchesOneRank, OverTwentySteps) {
  const Case c = GetParam();
  const std::string job = moe_pp_job(dir_, c.layers, c.capacity, "", c.llama);
  const ReferenceRun one = one_rank(job, kSteps);  // once for all the cases with this job
  const std::string spec = std::string("--partrain=") + c.spec;
  Proc p = start({PARTRAIN_CLI, "run", job, spec, "--nproc", std::to_string(c.nproc), "--steps",
                  std::to_string(kSteps)}, env("eppp"), dir_, "eppp");
  ASSERT_EQ(wait_exit(p.pid), 0) << slurp(p.err);
  const std::string err = slurp(p.err);
  EXPECT_NE(err.find("expert plugin ep "), std::string::npos) << err;
  EXPECT_NE(err.find("), checked; stage partition:"), std::string::npos) << err;
  const std::string ref = one.metrics, got = dir_ + "/eppp/metrics.jsonl";
  expect_same_losses(ref, got, kSteps, std::string(c.name) + " " + spec);
  expect_drops(expect_same_routing(ref, got, c.name), c.drops, c.capacity, std::string(c.name) + " " + spec);
  // Every block's counts are there, not only the last stage's.
  const std::vector<std::string> tokens = column(got, "expert_tokens");
  ASSERT_FALSE(tokens.empty());
  EXPECT_EQ(std::count(tokens.front().begin(), tokens.front().end(), '['), 1 + c.layers) << tokens.front();
  // The ep and pp collectives are both reported.
  EXPECT_FALSE(column(got, "ep_comm_ms").front().empty()) << slurp(got);
  EXPECT_FALSE(column(got, "pp_comm_ms").front().empty()) << slurp(got);
  // Each rank holds its stage's replicated tensors and its E/ep experts of the stage's
  // blocks, by hand (moe-tiny: V 256, T 64, C 128, F 512, 4 experts per block). Two blocks on
  // pp2: stage 0 (ranks 0 .. dp-1) has wte, wpe and block 0; stage 1 block 1, ln_f and its
  // copy of the tied wte.
  if (c.layers == 2 && !c.llama) {
    const double block = 256 + (3 * 128 * 128 + 384) + (128 * 128 + 128) + 256 + 4 * 128;
    const double expert = (512 * 128 + 512) + (128 * 512 + 128);
    const double stage0 = 256 * 128 + 64 * 128 + block + 4 * expert / c.ep;
    const double stage1 = block + 256 + 256 * 128 + 4 * expert / c.ep;
    for (int r = 0; r < c.nproc; ++r) {
      const std::string m = slurp(dir_ + "/eppp/memory.rank" + std::to_string(r) + ".json");
      EXPECT_EQ(field(m, "weights"), 4 * (r < c.nproc / 2 ? stage0 : stage1)) << c.name << " rank " << r;
    }
  }
}

// m = 16 / (2 x dp) micro-batches per dp rank: 2 on dp4, 4 on dp2.
INSTANTIATE_TEST_SUITE_P(
    Layouts, EpPpMatchesOneRank,
    ::testing::Values(Case{"ep2_pp2_dp4_1f1b_dropping", "ep2,pp2,sched=1f1b", 8, 2, 2, "1.0", true},
                      Case{"ep2_pp2_dp4_1f1b", "ep2,pp2,sched=1f1b", 8, 2, 2, "2.0", false},
                      Case{"ep2_pp2_dp2_gpipe_dropping", "ep2,pp2,sched=gpipe", 4, 2, 2, "1.0", true},
                      // ZB-H1: the experts' weight gradients in backward-input, the dense GEMMs split.
                      Case{"ep2_pp2_dp2_zbh1_dropping", "ep2,pp2,sched=zbh1", 4, 2, 2, "1.0", true},
                      Case{"ep2_pp2_dp2_interleaved2_dropping", "ep2,pp2,sched=interleaved:2", 4, 4, 2, "1.0", true},
                      Case{"ep4_pp2_dp4_interleaved2_dropping", "ep4,pp2,sched=interleaved:2", 8, 4, 4, "1.0", true},
                      Case{"llama_ep2_pp2_dp4_dropping", "ep2,pp2", 8, 2, 2, "1.0", true, true}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// Expert shards are saved under their logical names, each once (the coordinator refuses a
// commit whose pieces do not cover every tensor exactly once): ep2 x pp2 x dp4 trains 4
// steps, one rank resumes to 7, ep2 x pp2 x dp2 with interleaved stages to 10, pp2 x dp2
// (every expert on each rank of a stage) to 14; the whole trajectory equals one rank's 14
// steps. (The legs before the last end inside the warm-up, whose learning rates do not
// depend on the total steps.)
TEST_F(Runtime, EpPipelineCheckpointsResumeOnOtherLayouts) {
  constexpr int kTotal = 14;
  const std::string job = moe_pp_job(dir_, 4, "1.0", "[checkpoint]\nevery = 5\n");
  schedule_over(job, kTotal);
  const ReferenceRun ref = one_rank(job, kTotal);
  struct Leg {
    std::string spec, nproc, steps, says;
  };
  for (const Leg& leg : {Leg{"ep2,pp2", "8", "4", ""},
                         Leg{"dp1", "1", "7", "resuming at step 4"},
                         Leg{"ep2,pp2,sched=interleaved:2", "4", "10", "resuming at step 7"},
                         Leg{"pp2,dp2", "4", std::to_string(kTotal), "resuming at step 10"}}) {
    Proc p = start({PARTRAIN_CLI, "run", job, "--partrain=" + leg.spec, "--nproc", leg.nproc, "--steps", leg.steps},
                   env("ck"), dir_, "ck");
    ASSERT_EQ(wait_exit(p.pid), 0) << leg.spec << ": " << slurp(p.err);
    EXPECT_NE(slurp(p.err).find(leg.says), std::string::npos) << leg.spec << ": " << slurp(p.err);
  }
  const std::string label = "ep2,pp2,dp4 -> one rank -> ep2,pp2,dp2 interleaved:2 -> pp2,dp2";
  expect_same_losses(ref.metrics, dir_ + "/ck/metrics.jsonl", kTotal, label);
  expect_same_routing(ref.metrics, dir_ + "/ck/metrics.jsonl", label);
}

}  // namespace
