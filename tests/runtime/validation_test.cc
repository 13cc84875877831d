// The validation loss ([data] val_files, eval_every, eval_batches) is a function of the
// weights and the held-out shards only: every layout reports what one rank reports, at the
// same steps (issue 21: one rank, dp2, tp2 and pp2 within 1e-5). Dropout is on in training
// here, so the runs also show that evaluation runs without it on every layout (the
// independent check of the value itself is tests/engine/reference/val_loss_check.py).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime_helpers.h"

namespace {

using namespace partrain::testing;

constexpr int kSteps = 6;

// The tiny example with dropout and an evaluation every 3 steps.
std::string validation_job(const std::string& dir) {
  const std::string path = job_copy(kTiny, dir, "job.toml", "");
  edit_file(path, {{"dropout = 0.0", "dropout = 0.1"}, {"eval_every = 25", "eval_every = 3"}});
  return path;
}

// The val_loss of each step of a metrics.jsonl ("" where the step did not evaluate).
std::vector<std::string> val_losses(const std::string& metrics) { return column(metrics, "val_loss"); }

class ValidationLoss : public Runtime, public ::testing::WithParamInterface<const char*> {};

TEST_P(ValidationLoss, EqualsOneRanks) {
  const std::string job = validation_job(dir_);
  Proc one = start({PARTRAIN_CLI, "run", job, "--steps", std::to_string(kSteps)}, env("one"), dir_, "one");
  ASSERT_EQ(wait_exit(one.pid), 0) << slurp(one.err);
  const std::vector<std::string> ref = val_losses(dir_ + "/one/metrics.jsonl");
  ASSERT_EQ(ref.size(), static_cast<size_t>(kSteps));
  for (int s = 1; s <= kSteps; ++s) {
    EXPECT_EQ(ref[static_cast<size_t>(s - 1)].empty(), s % 3 != 0) << "step " << s << " evaluated or not";
  }
  const std::string spec = std::string("--partrain=") + GetParam();
  Proc p = start({PARTRAIN_CLI, "run", job, spec, "--nproc", "2", "--steps", std::to_string(kSteps)}, env("many"),
                 dir_, "many");
  ASSERT_EQ(wait_exit(p.pid), 0) << slurp(p.err);
  const std::vector<std::string> got = val_losses(dir_ + "/many/metrics.jsonl");
  ASSERT_EQ(got.size(), ref.size());
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_EQ(got[i].empty(), ref[i].empty()) << spec << " step " << i + 1;
    if (ref[i].empty()) continue;
    const double a = std::stod(ref[i]), b = std::stod(got[i]);
    EXPECT_LE(std::fabs(b - a), 1e-5 * a) << spec << " step " << i + 1 << ": " << b << " vs one rank " << a;
    worst = std::max(worst, std::fabs(b - a) / a);
  }
  std::printf("%s: largest relative validation-loss difference %.2e\n", spec.c_str(), worst);
  // The step line shows it too.
  EXPECT_NE(slurp(p.out).find(" | val "), std::string::npos) << slurp(p.out);
}

INSTANTIATE_TEST_SUITE_P(Layouts, ValidationLoss, ::testing::Values("dp2", "tp2", "pp2"),
                         [](const ::testing::TestParamInfo<const char*>& p) { return std::string(p.param); });

}  // namespace
