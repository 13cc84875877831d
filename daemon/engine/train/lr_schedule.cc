// See lr_schedule.h.
#include "engine/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace partrain::engine::train {

float lr_at(const TrainOptions& o, int64_t step) {
  const int64_t W = o.warmup_steps;
  if (W > 0 && step < W) return o.lr * static_cast<float>(step + 1) / static_cast<float>(W);
  const int64_t D = o.decay_steps > 0 ? o.decay_steps : o.steps;
  const double lr = o.lr, low = o.min_lr;
  const auto clamp01 = [](double x) { return std::clamp(x, 0.0, 1.0); };
  const double p = clamp01(static_cast<double>(step - W) / static_cast<double>(std::max<int64_t>(1, D - W)));
  switch (o.lr_schedule) {
    case LrSchedule::kConstant:
      return o.lr;
    case LrSchedule::kLinear:
      return static_cast<float>(lr - (lr - low) * p);
    case LrSchedule::kWsd: {
      const int64_t C = o.cooldown_steps > 0 ? o.cooldown_steps : std::max<int64_t>(1, (D - W) / 5);
      const double q = clamp01(static_cast<double>(step - (D - C)) / static_cast<double>(C));
      return static_cast<float>(lr - (lr - low) * q);
    }
    case LrSchedule::kCosine:
      break;
  }
  const double kPi = 3.14159265358979323846;
  return static_cast<float>(low + (lr - low) * 0.5 * (1.0 + std::cos(kPi * p)));
}

int64_t resolve_decay_steps(const TrainOptions& o, int64_t checkpointed) {
  if (o.decay_steps > 0) return o.decay_steps;
  if (checkpointed > 0) return checkpointed;
  return o.steps;
}

const char* lr_schedule_name(LrSchedule s) {
  switch (s) {
    case LrSchedule::kCosine: return "cosine";
    case LrSchedule::kLinear: return "linear";
    case LrSchedule::kConstant: return "constant";
    case LrSchedule::kWsd: return "wsd";
  }
  return "?";
}

}  // namespace partrain::engine::train
