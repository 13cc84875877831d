// ZeRO stages 1-3 end to end: zero1/2/3 on dp2 and dp4 train exactly what one rank trains
// (GPT-2 and LLaMA, 20 steps, 1e-5 relative), with gradient accumulation, several buckets
// and prefetch depths; the per-rank peak memory per category shows each sharded category
// at 1/dp plus the documented in-flight slots; bad [plugins.zeroN] keys are usage errors.
#include <algorithm>
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

struct Case {
  const char* name;  // test name suffix
  const char* job;   // "gpt2" or "llama"
  int dp;
  int stage;
};

// For test names and failure messages.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class ZeroMatchesOneRank : public Runtime, public ::testing::WithParamInterface<Case> {};

// The reference is `partrain run` on one rank (the engine's trainer, no plugin), trained
// once for all the cases with the same job (and for tp_test's).
TEST_P(ZeroMatchesOneRank, OverTwentySteps) {
  const Case c = GetParam();
  const std::string job = std::string(c.job) == "gpt2" ? kTiny : kLlama;
  const ReferenceRun one = one_rank(job_copy(job, dir_, "one.toml", ""), kSteps);
  // dp2: one micro-batch of 8 per rank, default buckets (one per step), zero3 without
  // prefetch. dp4: two micro-batches of 2 per rank (ZeRO-2/3 reduce-scatter each one),
  // 0.05 MiB buckets (several per step), zero3 prefetching two blocks.
  const std::string plugin = "zero" + std::to_string(c.stage);
  std::string table = "[plugins." + plugin + "]\n";
  if (c.dp == 4) table += "bucket_mb = 0.05\n";
  if (c.stage == 3) table += c.dp == 4 ? "prefetch = 2\n" : "prefetch = 0\n";
  const std::string copy = job_copy(job, dir_, "job.toml", table);
  std::string spec = "--partrain=dp" + std::to_string(c.dp) + "," + plugin;
  if (c.dp == 4) spec += ",mb=2";
  Proc z = start({PARTRAIN_CLI, "run", copy, spec, "--nproc", std::to_string(c.dp), "--steps",
                  std::to_string(kSteps)}, env("zero"), dir_, "zero");
  ASSERT_EQ(wait_exit(z.pid), 0) << slurp(z.err);
  EXPECT_NE(slurp(z.err).find("data plugin " + plugin + " "), std::string::npos) << slurp(z.err);
  expect_same_losses(one.metrics, dir_ + "/zero/metrics.jsonl", kSteps,
                     std::string(c.job) + " " + spec);
  // The step's collectives are counted: reduce-scatters (and gathers) happened.
  EXPECT_GE(first_collectives(dir_ + "/zero/metrics.jsonl"), 2);
}

INSTANTIATE_TEST_SUITE_P(
    Stages, ZeroMatchesOneRank,
    ::testing::Values(Case{"gpt2_zero1_dp2", "gpt2", 2, 1}, Case{"gpt2_zero1_dp4", "gpt2", 4, 1},
                      Case{"gpt2_zero2_dp2", "gpt2", 2, 2}, Case{"gpt2_zero2_dp4", "gpt2", 4, 2},
                      Case{"gpt2_zero3_dp2", "gpt2", 2, 3}, Case{"gpt2_zero3_dp4", "gpt2", 4, 3},
                      Case{"llama_zero1_dp2", "llama", 2, 1}, Case{"llama_zero1_dp4", "llama", 4, 1},
                      Case{"llama_zero2_dp2", "llama", 2, 2}, Case{"llama_zero2_dp4", "llama", 4, 2},
                      Case{"llama_zero3_dp2", "llama", 2, 3}, Case{"llama_zero3_dp4", "llama", 4, 3}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// Per-rank peak bytes per category, dp4 against zero1/2/3 on dp4, on a 16-block GPT-2
// (width 64) where the blocks dominate. Expected, by hand, with n parameters, blocks of
// b = 12 C^2 + 13 C parameters, embeddings e = V C + T C and a tail t = 2 C (ln_f):
//   zero1: optimizer n/4 (of 2 moments), grads n + n/4 (the flat buffer + the reduced shard)
//   zero2: optimizer n/4, grads n/4 + 2 b (two block slots) + e + t
//   zero3: optimizer n/4, grads as zero2, weights n/4 + (prefetch + 1) b + e + t
//   activations: equal everywhere (the same micro-batch on every layout)
TEST_F(Runtime, ZeroShardsEachCategoryOverFourRanks) {
  constexpr double C = 64, V = 256, T = 32, L = 16, D = 4;
  const double b = 12 * C * C + 13 * C, e = V * C + T * C, t = 2 * C, n = L * b + e + t;
  const std::string data = fs::path(kTiny).parent_path().string() + "/data/licenses_train.bin";
  const std::string job = dir_ + "/deep.toml";
  std::ofstream(job) << "[job]\nname = \"deep\"\n[model]\narch = \"gpt2\"\nvocab_size = 256\n"
                        "seq_len = 32\nlayers = 16\nhidden = 64\nheads = 4\n[data]\ntrain_files = [\""
                     << data << "\"]\n[training]\nsteps = 2\nglobal_batch = 8\nmicro_batch = 2\n"
                        "lr = 1e-3\nseed = 1\n";
  const std::vector<std::string> runs = {"dp", "zero1", "zero2", "zero3"};
  for (const std::string& r : runs) {
    const std::string spec = r == "dp" ? "--partrain=dp4" : "--partrain=dp4," + r;
    Proc p = start({PARTRAIN_CLI, "run", job, spec, "--nproc", "4"}, env(r), dir_, r);
    ASSERT_EQ(wait_exit(p.pid), 0) << slurp(p.err);
  }
  std::printf("per-rank peak MiB   weights     grads  optimizer  activations\n");
  for (int rank = 0; rank < 4; ++rank) {
    auto mem = [&](const std::string& run) {
      return slurp(dir_ + "/" + run + "/memory.rank" + std::to_string(rank) + ".json");
    };
    const std::string dp = mem("dp");
    ASSERT_EQ(field(dp, "weights"), 4 * n);
    ASSERT_EQ(field(dp, "grads"), 4 * n);
    ASSERT_EQ(field(dp, "optimizer"), 2 * 4 * n);
    for (const std::string& r : runs) {
      const std::string m = mem(r);
      const double w = field(m, "weights") / field(dp, "weights");
      const double g = field(m, "grads") / field(dp, "grads");
      const double o = field(m, "optimizer") / field(dp, "optimizer");
      if (rank == 0) {
        std::printf("%-8s %16.3f %9.3f %10.3f %12.3f   (ratios to dp4: %.3f %.3f %.3f)\n", r.c_str(),
                    field(m, "weights") / (1 << 20), field(m, "grads") / (1 << 20),
                    field(m, "optimizer") / (1 << 20), field(m, "activations") / (1 << 20), w, g, o);
      }
      EXPECT_EQ(field(m, "activations"), field(dp, "activations")) << r;
      if (r == "dp") continue;
      // A balanced shard is n/D, give or take one element.
      const double shard = 1 / D, slack = 2 / n;
      EXPECT_NEAR(o, shard, slack) << r << " rank " << rank << " optimizer";
      if (r == "zero1") {
        EXPECT_NEAR(w, 1.0, slack) << "zero1 weights";
        EXPECT_NEAR(g, 1.0 + shard, slack) << "zero1 grads";
        continue;
      }
      EXPECT_NEAR(g, shard + (2 * b + e + t) / n, slack) << r << " rank " << rank << " grads";
      const double weights = r == "zero2" ? 1.0 : shard + (2 * b + e + t) / n;
      EXPECT_NEAR(w, weights, slack) << r << " rank " << rank << " weights";
    }
  }
}

// A bad [plugins.zeroN] key or value is a usage error (exit 2) naming the key and the fix.
TEST_F(Runtime, BadZeroTableIsAConfigurationError) {
  const std::string job = job_copy(kTiny, dir_, "bad.toml", "[plugins.zero3]\nprefetch = -1\n");
  Proc p = start({PARTRAIND, "--standalone", "--nproc", "2", "--partrain", "dp2,zero3", "--steps",
                  "2", job}, env("bad"), dir_, "bad");
  EXPECT_EQ(wait_exit(p.pid), 2);
  EXPECT_NE(slurp(p.err).find("data plugin init: [plugins.zero3] prefetch: need a whole number of "
                              "blocks from 0 to 64, e.g. 1"), std::string::npos) << slurp(p.err);
  const std::string job2 = job_copy(kTiny, dir_, "bad2.toml", "[plugins.zero1]\nprefetch = 1\n");
  Proc q = start({PARTRAIND, "--standalone", "--nproc", "2", "--partrain", "dp2,zero1", "--steps",
                  "2", job2}, env("bad2"), dir_, "bad2");
  EXPECT_EQ(wait_exit(q.pid), 2);
  EXPECT_NE(slurp(q.err).find("[plugins.zero1]: unknown key 'prefetch'; the only key is bucket_mb"),
            std::string::npos) << slurp(q.err);
}

}  // namespace
