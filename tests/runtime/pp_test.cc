// Pipeline parallelism end to end (worker/pipeline_executor, the shipped schedule plugins):
// pp2 and pp4 with GPipe, 1F1B, interleaved 1F1B (v = 2) and ZB-H1 (backward split into
// input and weight gradients), pp2 x dp2, tp2 x pp2 and tp2 x pp2 x dp2, train exactly what
// one rank trains (20 steps, 1e-5 relative; GPT-2 with its tied head and dropout, LLaMA
// untied, a top-2 mixture of experts with each stage's aux loss); 1F1B keeps fewer activations than GPipe at the same m, exactly in the
// ratio of the micro-batches each holds at once; layouts the runtime does not run yet are
// refused before any step (exit 2, one line).
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "runtime_helpers.h"

namespace {

using namespace partrain::testing;

constexpr int kSteps = 20;

// A copy of the example with `layers` blocks and micro-batches of `micro_batch` sequences
// (global batch 16), and `model` (e.g. a dropout line) replacing "dropout = 0.0".
std::string pp_job(const std::string& example, const std::string& dir, const std::string& name, int layers,
                   int micro_batch, const std::string& model = "", const std::string& extra = "") {
  const std::string path = job_copy(example, dir, name, extra);
  edit_file(path, {{"layers = 2", "layers = " + std::to_string(layers)},
                   {"micro_batch = 8", "micro_batch = " + std::to_string(micro_batch)}});
  if (!model.empty()) edit_file(path, {{"dropout = 0.0", model}});
  return path;
}

struct Case {
  const char* name;
  const char* job;  // "gpt2", "llama" or "moe"
  const char* spec;
  int nproc;
  int layers;
  int micro_batch;
  const char* model;  // replaces "dropout = 0.0" (gpt2)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class PpMatchesOneRank : public Runtime, public ::testing::WithParamInterface<Case> {};

TEST_P(PpMatchesOneRank, OverTwentySteps) {
  const Case c = GetParam();
  const std::string name = c.job;
  const std::string example = name == "gpt2" ? kTiny : name == "llama" ? kLlama : kMoe;
  const std::string job = pp_job(example, dir_, "job.toml", c.layers, c.micro_batch, c.model);
  const ReferenceRun one = one_rank(job, kSteps);  // once for all the cases with this job
  const std::string spec = std::string("--partrain=") + c.spec;
  Proc p = start({PARTRAIN_CLI, "run", job, spec, "--nproc", std::to_string(c.nproc), "--steps",
                  std::to_string(kSteps)}, env("pp"), dir_, "pp");
  ASSERT_EQ(wait_exit(p.pid), 0) << slurp(p.err);
  const std::string err = slurp(p.err);
  EXPECT_NE(err.find("), checked; stage partition:"), std::string::npos) << err;
  expect_same_losses(one.metrics, dir_ + "/pp/metrics.jsonl", kSteps, std::string(c.name) + " " + spec);
  // The pipeline's measured numbers are in every step's line.
  const std::string metrics = slurp(dir_ + "/pp/metrics.jsonl");
  for (const char* key : {"\"bubble_share\":", "\"pp_comm_ms\":", "\"pp_exposed_ms\":", "\"pp\":"}) {
    EXPECT_NE(metrics.find(key), std::string::npos) << key << " in " << metrics;
  }
  for (int r = 0; r < c.nproc; ++r) {
    EXPECT_TRUE(fs::exists(dir_ + "/pp/memory.rank" + std::to_string(r) + ".json")) << r;
  }
}

constexpr const char* kDrop = "dropout = 0.1";

// m = 16 / (2 x dp) micro-batches of 2 sequences: 8 on one dp rank, 4 with dp2.
INSTANTIATE_TEST_SUITE_P(
    Layouts, PpMatchesOneRank,
    ::testing::Values(Case{"gpt2_pp2_gpipe", "gpt2", "pp2,sched=gpipe", 2, 4, 2, ""},
                      Case{"gpt2_pp2_1f1b_dropout", "gpt2", "pp2,sched=1f1b", 2, 4, 2, kDrop},
                      Case{"gpt2_pp2_interleaved2", "gpt2", "pp2,sched=interleaved:2", 2, 4, 2, ""},
                      Case{"gpt2_pp4_gpipe", "gpt2", "pp4,sched=gpipe", 4, 4, 2, ""},
                      Case{"gpt2_pp4_1f1b", "gpt2", "pp4,sched=1f1b", 4, 4, 2, ""},
                      Case{"gpt2_pp4_interleaved2_dropout", "gpt2", "pp4,sched=interleaved:2", 4, 8, 2, kDrop},
                      Case{"gpt2_pp2_zbh1_dropout", "gpt2", "pp2,sched=zbh1", 2, 4, 2, kDrop},
                      Case{"gpt2_pp4_zbh1", "gpt2", "pp4,sched=zbh1", 4, 4, 2, ""},
                      Case{"gpt2_pp2_dp2", "gpt2", "pp2,dp2", 4, 4, 2, ""},
                      Case{"gpt2_pp2_dp2_interleaved2", "gpt2", "pp2,dp2,sched=interleaved:2", 4, 4, 2, ""},
                      Case{"gpt2_tp2_pp2", "gpt2", "tp2,pp2", 4, 4, 2, kDrop},
                      Case{"gpt2_tp2_pp2_dp2", "gpt2", "tp2,pp2,dp2", 8, 4, 2, ""},
                      Case{"llama_pp2_1f1b", "llama", "pp2", 2, 4, 2, ""},
                      Case{"llama_tp2_pp2_nosp_interleaved2", "llama", "tp2,pp2,nosp,sched=interleaved:2", 4, 4, 2, ""},
                      Case{"llama_pp4_interleaved2", "llama", "pp4,sched=interleaved:2", 4, 8, 2, ""},
                      Case{"llama_pp2_zbh1", "llama", "pp2,sched=zbh1", 2, 4, 2, ""},
                      Case{"moe_pp2_dp2", "moe", "pp2,dp2", 4, 2, 2, ""}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// At the same m = 8, GPipe keeps all 8 micro-batches' activations on every rank, 1F1B at
// most pp - rank (rank 0: 2, rank 1: 1 for pp2): without recompute every activation buffer
// belongs to one micro-batch, so the peaks stand exactly in that ratio.
TEST_F(Runtime, OneFOneBKeepsFewerActivationsThanGpipe) {
  const std::string job = pp_job(kTiny, dir_, "job.toml", 4, 2);
  for (const char* sched : {"gpipe", "1f1b"}) {
    Proc p = start({PARTRAIN_CLI, "run", job, std::string("--partrain=pp2,sched=") + sched, "--nproc", "2",
                    "--steps", "2"}, env(sched), dir_, sched);
    ASSERT_EQ(wait_exit(p.pid), 0) << slurp(p.err);
  }
  for (int r = 0; r < 2; ++r) {
    const std::string file = "/memory.rank" + std::to_string(r) + ".json";
    const double gpipe = field(slurp(dir_ + "/gpipe" + file), "activations");
    const double one_f_one_b = field(slurp(dir_ + "/1f1b" + file), "activations");
    std::printf("rank %d peak activations: gpipe %.3f MiB, 1f1b %.3f MiB (%.3f)\n", r, gpipe / (1 << 20),
                one_f_one_b / (1 << 20), one_f_one_b / gpipe);
    EXPECT_LT(one_f_one_b, gpipe) << r;
    EXPECT_EQ(one_f_one_b * 8, gpipe * (2 - r)) << r;
  }
}

// What the pipeline runtime does not run yet is refused on every rank before any step,
// exit 2, with the reason and the fix.
TEST_F(Runtime, PpLayoutsNotRunYetAreRefused) {
  struct Bad {
    std::string spec, nproc, model, says;
  };
  for (const Bad& b : {Bad{"pp2,dp2,zero2,sched=zbh1", "4", "", "but zero2 reduces each block's gradient as soon"},
                       Bad{"pp2,dp2,zero3,sched=zbh1", "4", "", "but zero3 reduces each block's gradient as soon"}}) {
    const std::string job = pp_job(kTiny, dir_, "bad.toml", 2, 2, b.model);
    Proc p = start({PARTRAIN_CLI, "run", job, "--partrain=" + b.spec, "--nproc", b.nproc, "--steps", "2"},
                   env("bad"), dir_, "bad");
    EXPECT_EQ(wait_exit(p.pid), 2) << b.spec;
    const std::string err = slurp(p.err);
    EXPECT_NE(err.find(b.says), std::string::npos) << err;
  }
}

// Checkpoints by logical name across layouts: one rank trains 4 steps, pp2 x dp2 with
// interleaved stages resumes from its pieces to step 11 (saving at 5, 10 and 11), tp2 x pp2
// resumes from those to step 14; the whole trajectory equals one rank's 14 steps. (The
// legs before the last end by step 11, where the learning rate (warm-up 10) does not yet
// depend on the total steps.)
TEST_F(Runtime, PipelineCheckpointsResumeOnOtherLayouts) {
  constexpr int kTotal = 14;
  const std::string job = pp_job(kTiny, dir_, "job.toml", 4, 2, "dropout = 0.1", "");
  std::string text = slurp(job);
  text.replace(text.find("every = 0"), 9, "every = 5");
  std::ofstream(job) << text;
  schedule_over(job, kTotal);
  const ReferenceRun ref = one_rank(job, kTotal);
  struct Leg {
    std::string spec, nproc, steps, says;
  };
  for (const Leg& leg : {Leg{"dp1", "1", "4", ""},
                         Leg{"pp2,dp2,sched=interleaved:2", "4", "11", "resuming at step 4"},
                         Leg{"tp2,pp2", "4", std::to_string(kTotal), "resuming at step 11"}}) {
    Proc p = start({PARTRAIN_CLI, "run", job, "--partrain=" + leg.spec, "--nproc", leg.nproc, "--steps", leg.steps},
                   env("ck"), dir_, "ck");
    ASSERT_EQ(wait_exit(p.pid), 0) << slurp(p.err);
    EXPECT_NE(slurp(p.err).find(leg.says), std::string::npos) << leg.spec << ": " << slurp(p.err);
  }
  expect_same_losses(ref.metrics, dir_ + "/ck/metrics.jsonl", kTotal, "one rank -> pp2,dp2,interleaved:2 -> tp2,pp2");
}

// SIGTERM (Slurm's preemption) stops every pp rank at a step boundary with a checkpoint and
// the retryable exit 75; the same command run again resumes there and the whole run equals
// one rank's (the reference of the gpt2 pp cases above). The signal comes after step 2, so
// 20 steps leave the stop 18 steps of margin.
TEST_F(Runtime, SigtermStopsAPipelineAtAStepAndItResumes) {
  constexpr int kLong = kSteps;
  const std::string job = pp_job(kTiny, dir_, "job.toml", 4, 2);
  const ReferenceRun ref = one_rank(job, kLong);
  const std::vector<std::string> cmd = {PARTRAIN_CLI, "run", job, "--partrain=pp2,sched=interleaved:2",
                                        "--nproc", "2", "--steps", std::to_string(kLong)};
  Proc p = start(cmd, env("pp"), dir_, "pp");
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline && losses(dir_ + "/pp/metrics.jsonl").size() < 2) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(::kill(p.pid, SIGTERM), 0);
  ASSERT_EQ(wait_exit(p.pid), 75) << slurp(p.err);
  const std::string err = slurp(p.err);
  EXPECT_NE(err.find("rank 1 ("), std::string::npos) << err;
  EXPECT_NE(err.find("stopped at a step boundary"), std::string::npos) << err;
  const size_t stopped = losses(dir_ + "/pp/metrics.jsonl").size();
  EXPECT_LT(stopped, static_cast<size_t>(kLong));
  Proc again = start(cmd, env("pp"), dir_, "again");
  ASSERT_EQ(wait_exit(again.pid), 0) << slurp(again.err);
  EXPECT_NE(slurp(again.err).find("resuming at step " + std::to_string(stopped)), std::string::npos)
      << slurp(again.err);
  expect_same_losses(ref.metrics, dir_ + "/pp/metrics.jsonl", kLong,
                     "pp2 interleaved stopped by SIGTERM at step " + std::to_string(stopped) + " and resumed");
}

}  // namespace
