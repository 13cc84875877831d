// The learning-rate schedule: linear warm-up, then one of cosine, linear, constant or
// warmup-stable-decay (WSD), as a function of the optimizer step alone. Its length is
// decay_steps, not the --steps of this invocation: a run's first start fixes it (default:
// its steps) and its checkpoints keep it, so a run resumed with a larger --steps keeps the
// schedule it started with and trains on at min_lr past its end.
#pragma once

#include <cstdint>
#include <string_view>

#include "engine/options.h"

namespace partrain::engine::train {

// The learning rate of optimizer step `step` (0-based). With W = warmup_steps,
// D = decay_steps (0: steps), p = clamp((step - W) / max(1, D - W), 0, 1):
//   step < W   lr * (step + 1) / W                          (every schedule)
//   cosine     min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2
//   linear     lr - (lr - min_lr) * p
//   constant   lr
//   wsd        lr until step D - C, then linear to min_lr at step D, with C = cooldown_steps
//              (0: max(1, (D - W) / 5)): lr - (lr - min_lr) * clamp((step - (D - C)) / C, 0, 1)
// Example: lr 1e-3, min_lr 1e-4, W 2, D 10, cosine: step 0 5e-4, step 1 1e-3, step 6
// (p = 0.5) 5.5e-4, step 10 and after 1e-4; linear step 6 5.5e-4; wsd (C = 1) steps 2..9
// 1e-3, step 10 and after 1e-4.
float lr_at(const TrainOptions& o, int64_t step);

// The schedule's length for a run: the job's decay_steps when it sets one; else the one its
// checkpoint kept (`checkpointed`, 0 for a fresh run or a checkpoint older than the key);
// else the run's steps.
int64_t resolve_decay_steps(const TrainOptions& o, int64_t checkpointed);

// "cosine", "linear", "constant", "wsd".
const char* lr_schedule_name(LrSchedule s);

}  // namespace partrain::engine::train
