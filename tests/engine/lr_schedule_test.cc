// The learning-rate schedules against hand arithmetic (lr 1e-3, min_lr 1e-4, 2 warm-up
// steps, decay over 10 steps unless a test says otherwise), and the rule that a run's
// schedule length comes from its first start, not from this invocation's --steps.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/train/lr_schedule.h"

namespace partrain::engine::train {
namespace {

constexpr double kPi = 3.141592653589793;

TrainOptions base(LrSchedule s) {
  TrainOptions o;
  o.lr = 1e-3f;
  o.min_lr = 1e-4f;
  o.warmup_steps = 2;
  o.steps = 10;
  o.lr_schedule = s;
  return o;
}

TEST(LrSchedule, WarmupIsTheSameForEverySchedule) {
  for (LrSchedule s : {LrSchedule::kCosine, LrSchedule::kLinear, LrSchedule::kConstant, LrSchedule::kWsd}) {
    const TrainOptions o = base(s);
    EXPECT_FLOAT_EQ(lr_at(o, 0), 5e-4f) << lr_schedule_name(s);  // (0 + 1) / 2 of the peak
    EXPECT_FLOAT_EQ(lr_at(o, 1), 1e-3f) << lr_schedule_name(s);
    EXPECT_FLOAT_EQ(lr_at(o, 2), 1e-3f) << lr_schedule_name(s);  // p = 0: the peak
  }
}

TEST(LrSchedule, CosineByHand) {
  const TrainOptions o = base(LrSchedule::kCosine);
  // p = (6 - 2) / 8 = 0.5: the midpoint of lr and min_lr.
  EXPECT_NEAR(lr_at(o, 6), 5.5e-4, 1e-9);
  // p = 1/8: 1e-4 + 9e-4 * (1 + cos(pi / 8)) / 2 = 1e-4 + 9e-4 * 0.96194 = 9.6575e-4
  EXPECT_NEAR(lr_at(o, 3), 1e-4 + 9e-4 * (1 + std::cos(kPi / 8)) / 2, 1e-9);
  EXPECT_NEAR(lr_at(o, 3), 9.6575e-4, 1e-8);
  EXPECT_NEAR(lr_at(o, 10), 1e-4, 1e-10);
  EXPECT_NEAR(lr_at(o, 1000), 1e-4, 1e-10);  // clamped past the end
}

TEST(LrSchedule, LinearByHand) {
  const TrainOptions o = base(LrSchedule::kLinear);
  EXPECT_NEAR(lr_at(o, 6), 5.5e-4, 1e-9);         // 1e-3 - 9e-4 * 0.5
  EXPECT_NEAR(lr_at(o, 4), 7.75e-4, 1e-9);        // 1e-3 - 9e-4 * 0.25
  EXPECT_NEAR(lr_at(o, 9), 2.125e-4, 1e-9);       // 1e-3 - 9e-4 * 7/8
  EXPECT_NEAR(lr_at(o, 10), 1e-4, 1e-10);
}

TEST(LrSchedule, ConstantStaysAtThePeak) {
  const TrainOptions o = base(LrSchedule::kConstant);
  for (int64_t s : {2, 5, 9, 10, 500}) EXPECT_FLOAT_EQ(lr_at(o, s), 1e-3f) << s;
}

TEST(LrSchedule, WarmupStableDecayByHand) {
  TrainOptions o = base(LrSchedule::kWsd);
  o.decay_steps = 22;  // 20 steps after the warm-up; cooldown 0 = 20 / 5 = 4 steps
  EXPECT_FLOAT_EQ(lr_at(o, 5), 1e-3f);
  EXPECT_FLOAT_EQ(lr_at(o, 18), 1e-3f);              // D - C = 18: the decay starts here
  EXPECT_NEAR(lr_at(o, 19), 1e-3 - 9e-4 * 0.25, 1e-9);  // 7.75e-4
  EXPECT_NEAR(lr_at(o, 20), 5.5e-4, 1e-9);
  EXPECT_NEAR(lr_at(o, 22), 1e-4, 1e-10);
  EXPECT_NEAR(lr_at(o, 40), 1e-4, 1e-10);
  o.cooldown_steps = 10;  // decay from step 12
  EXPECT_FLOAT_EQ(lr_at(o, 12), 1e-3f);
  EXPECT_NEAR(lr_at(o, 17), 5.5e-4, 1e-9);
}

// decay_steps, not steps, sets the length: the same schedule whatever this run's steps.
TEST(LrSchedule, DecayStepsNotStepsSetTheLength) {
  TrainOptions o = base(LrSchedule::kCosine);
  o.decay_steps = 10;
  o.steps = 14;  // a resumed run asked for more steps
  EXPECT_NEAR(lr_at(o, 6), 5.5e-4, 1e-9);
  EXPECT_NEAR(lr_at(o, 12), 1e-4, 1e-10);
}

TEST(LrSchedule, ResolveDecaySteps) {
  TrainOptions o = base(LrSchedule::kCosine);
  o.steps = 24;
  EXPECT_EQ(resolve_decay_steps(o, 0), 24);   // a fresh run: its steps
  EXPECT_EQ(resolve_decay_steps(o, 20), 20);  // resumed: the length it started with
  o.decay_steps = 30;
  EXPECT_EQ(resolve_decay_steps(o, 20), 30);  // the job says so
  EXPECT_EQ(resolve_decay_steps(o, 0), 30);
}

}  // namespace
}  // namespace partrain::engine::train
