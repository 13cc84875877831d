// Gradient compression end to end (grad=NAME picks the data plugin): dp2 with grad=onebit on
// the tiny example, started as a user does, against the one-rank run that plain dp2 equals
// (runtime_test: 1e-5): the warm-up steps equal it, the compressed steps keep training (0.5
// below the warm-up's last loss) and end within kOneBitTolerance of it at step kSteps, and metrics.jsonl's dp_bytes falls by
// the factor the wire format promises (1 + ceil(n / 32) words per tensor of n floats:
// between 31 and 32 for this model's 437760 floats in its tensors). The same for
// grad=powersgd at rank 4: r (rows + cols) floats per tensor viewed as rows x cols, 18176 of
// them for this model (e.g. the 128 x 384 attention weight, viewed 256 x 192: 4 x 448), a
// factor of 24.08. A resume repeats onebit's warm-up (its residual is not checkpointed),
// the same way every time. Mistakes in the spec or in [plugins.onebit] are usage errors
// (exit 2) naming the thing and the fix.
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
constexpr int kWarmup = 5;
// Relative loss difference allowed at step kSteps: measured 11.7% (one scale per tensor,
// compressing the gradient before AdamW; see [plugins.onebit] in partrain.toml(5)).
constexpr double kOneBitTolerance = 0.15;
// The same for powersgd at rank 4: measured 0.65%.
constexpr double kPowerSgdTolerance = 0.02;

// dp_bytes of every step of a metrics.jsonl.
std::vector<double> dp_bytes(const std::string& metrics) {
  std::vector<double> out;
  static const std::regex kBytes("\"dp_bytes\":([0-9]+)");
  for (const std::string& line : step_lines(metrics)) {
    std::smatch m;
    out.push_back(std::regex_search(line, m, kBytes) ? std::stod(m[1].str()) : 0.0);
  }
  return out;
}

TEST_F(Runtime, OneBitTrainsLikeDataParallelOnAThirtySecondOfTheBytes) {
  const ReferenceRun one = one_rank(job_copy(kTiny, dir_, "one.toml", ""), kSteps);
  const std::string job = job_copy(kTiny, dir_, "onebit.toml",
                                   "[plugins.onebit]\nwarmup_steps = " + std::to_string(kWarmup) + "\n");
  Proc p = start({PARTRAIN_CLI, "run", job, "--partrain=dp2,grad=onebit", "--nproc", "2", "--steps",
                  std::to_string(kSteps)}, env("onebit"), dir_, "onebit");
  ASSERT_EQ(wait_exit(p.pid), 0) << slurp(p.err);
  EXPECT_NE(slurp(p.err).find("data plugin onebit"), std::string::npos) << slurp(p.err);
  const std::string metrics = dir_ + "/onebit/metrics.jsonl";
  const std::vector<double> ref = losses(one.metrics), got = losses(metrics);
  ASSERT_EQ(ref.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(got.size(), ref.size());
  for (int i = 0; i < kWarmup; ++i) {  // warm-up: plain averages, as dp2 and one rank
    EXPECT_LE(std::fabs(got[i] - ref[i]), 1e-5 * ref[i]) << "step " << i + 1;
  }
  const double last = std::fabs(got.back() - ref.back()) / ref.back();
  std::printf("onebit dp2: loss %.4f -> %.4f, one rank (= dp2) %.4f -> %.4f at step %d: %.2f%% apart\n",
              got.front(), got.back(), ref.front(), ref.back(), kSteps, 100 * last);
  EXPECT_LT(got.back(), got[kWarmup - 1] - 0.5);  // it trains on after the warm-up
  EXPECT_LE(last, kOneBitTolerance);
  // The bytes a rank put into the step's collectives: all floats at warm-up, packed after.
  const std::vector<double> bytes = dp_bytes(metrics);
  ASSERT_EQ(bytes.size(), got.size());
  EXPECT_EQ(bytes[0], 4.0 * 437760);
  for (int i = kWarmup; i < kSteps; ++i) {
    const double ratio = bytes[0] / bytes[static_cast<size_t>(i)];
    EXPECT_GT(ratio, 31.0) << "step " << i + 1;
    EXPECT_LE(ratio, 32.0) << "step " << i + 1;
  }
  std::printf("onebit dp2: %.0f bytes per step at warm-up (= dp), %.0f compressed: %.2fx fewer\n", bytes[0],
              bytes.back(), bytes[0] / bytes.back());
}

// The residual is not checkpointed (ABI v2 has no plugin state), so a resume repeats the
// warm-up from the step it resumes at, the same way every time: two copies of one run
// stopped at step 6 (warm-up 2: steps 3-6 compressed) resume to step 10; both send all
// floats again at steps 7 and 8, compress from step 9, and agree on every loss bit for bit.
TEST_F(Runtime, OneBitResumeRepeatsTheWarmUpTheSameWay) {
  const std::string job = job_copy(kTiny, dir_, "resume.toml", "[plugins.onebit]\nwarmup_steps = 2\n");
  schedule_over(job, 20);  // (above the example's 10 learning-rate warm-up steps)
  auto run = [&](const std::string& name, int steps) {
    Proc p = start({PARTRAIN_CLI, "run", job, "--partrain=dp2,grad=onebit", "--nproc", "2", "--steps",
                    std::to_string(steps)}, env(name), dir_, name + std::to_string(steps));
    EXPECT_EQ(wait_exit(p.pid), 0) << slurp(p.err);
  };
  run("a", 6);
  ASSERT_TRUE(fs::exists(dir_ + "/a/checkpoints"));
  fs::copy(dir_ + "/a", dir_ + "/b", fs::copy_options::recursive);
  run("a", 10);
  run("b", 10);
  const std::vector<double> bytes = dp_bytes(dir_ + "/a/metrics.jsonl");
  ASSERT_EQ(bytes.size(), 10u);
  for (size_t i = 0; i < bytes.size(); ++i) {
    const bool warm = i < 2 || i == 6 || i == 7;
    EXPECT_EQ(bytes[i] == 4.0 * 437760, warm) << "step " << i + 1 << ": " << bytes[i] << " bytes";
  }
  const std::vector<std::string> a = column(dir_ + "/a/metrics.jsonl", "loss");
  EXPECT_EQ(a, column(dir_ + "/b/metrics.jsonl", "loss"));
  EXPECT_EQ(a.size(), 10u);
}

// Each mistake: exit 2 before training, one line naming the thing and the fix.
TEST_F(Runtime, GradientPluginMistakesAreUsageErrors) {
  struct Mistake {
    const char* run;
    const char* spec;
    const char* table;
    const char* message;
  };
  const Mistake cases[] = {
      {"zero", "dp2,zero1,grad=onebit", "",
       "partrain: grad=onebit replaces plain data parallel's gradient average, and zero1 has a data "
       "plugin of its own; drop grad= or use zero0"},
      {"empty", "dp2,grad=", "", "partrain: 'grad=' in --partrain: grad needs a data plugin's name"},
      {"missing", "dp2,grad=nosuch", "", "plugin 'nosuch' is not installed"},
      {"table", "dp2,grad=onebit", "[plugins.onebit]\nwarmup_steps = -1\n",
       "[plugins.onebit] warmup_steps: need a whole number of steps, 0 or more, e.g. 10"},
  };
  for (const Mistake& m : cases) {
    SCOPED_TRACE(m.run);
    const std::string job = job_copy(kTiny, dir_, std::string(m.run) + ".toml", m.table);
    Proc p = start({PARTRAIN_CLI, "run", job, std::string("--partrain=") + m.spec, "--nproc", "2", "--steps", "2"},
                   env(m.run), dir_, m.run);
    EXPECT_EQ(wait_exit(p.pid), 2);
    EXPECT_NE(slurp(p.err).find(m.message), std::string::npos) << slurp(p.err);
  }
}

TEST_F(Runtime, PowerSgdTrainsLikeDataParallelOnATwentyFourthOfTheBytes) {
  const ReferenceRun one = one_rank(job_copy(kTiny, dir_, "one.toml", ""), kSteps);
  const std::string job = job_copy(kTiny, dir_, "powersgd.toml",
                                   "[plugins.powersgd]\nrank = 4\nwarmup_steps = " + std::to_string(kWarmup) + "\n");
  Proc p = start({PARTRAIN_CLI, "run", job, "--partrain=dp2,grad=powersgd", "--nproc", "2", "--steps",
                  std::to_string(kSteps)}, env("powersgd"), dir_, "powersgd");
  ASSERT_EQ(wait_exit(p.pid), 0) << slurp(p.err);
  const std::string metrics = dir_ + "/powersgd/metrics.jsonl";
  const std::vector<double> ref = losses(one.metrics), got = losses(metrics);
  ASSERT_EQ(ref.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(got.size(), ref.size());
  for (int i = 0; i < kWarmup; ++i) EXPECT_LE(std::fabs(got[i] - ref[i]), 1e-5 * ref[i]) << "step " << i + 1;
  const double last = std::fabs(got.back() - ref.back()) / ref.back();
  std::printf("powersgd dp2: loss %.4f -> %.4f, one rank (= dp2) %.4f -> %.4f at step %d: %.2f%% apart\n",
              got.front(), got.back(), ref.front(), ref.back(), kSteps, 100 * last);
  EXPECT_LT(got.back(), got[kWarmup - 1] - 0.5);
  EXPECT_LE(last, kPowerSgdTolerance);
  const std::vector<double> bytes = dp_bytes(metrics);
  ASSERT_EQ(bytes.size(), got.size());
  EXPECT_EQ(bytes[0], 4.0 * 437760);
  for (int i = kWarmup; i < kSteps; ++i) EXPECT_EQ(bytes[static_cast<size_t>(i)], 4.0 * 18176) << "step " << i + 1;
  std::printf("powersgd dp2: %.0f bytes per step at warm-up (= dp), %.0f compressed: %.2fx fewer\n", bytes[0],
              bytes.back(), bytes[0] / bytes.back());
}

}  // namespace
