// AdamW over a model's parameter table, with global-norm gradient clipping; its learning
// rate per step comes from the schedule (lr_schedule.h). Under ZeRO
// (model->shard().stage >= 1) it keeps the moments (and master weights) of the rank's shard
// only, laid out as the shard buffers (ShardOptions::ranges one after the other), and steps
// each run's parameters with model->shard_grads().
#pragma once

#include <cstdint>
#include <memory>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/model/model.h"
#include "engine/options.h"
#include "engine/train/lr_schedule.h"

namespace partrain::engine::train {

struct OptimizerStepStats {
  float grad_norm = 0;   // global L2 norm of the gradient before clipping
  float clip_scale = 1;  // factor applied to the gradient (1 when not clipped)
};

class AdamW {
 public:
  // Allocates the moments (and fp32 master weights where the backend needs them), of the
  // model's shard under ZeRO.
  static Result<std::unique_ptr<AdamW>> create(model::Model* model, const TrainOptions& o);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // One step with learning rate `lr` on the accumulated gradients: clip to grad_clip by
  // `grad_norm`, the global norm of the whole model's gradient (PyTorch's clip_grad_norm_:
  // scale = min(1, clip / (norm + 1e-6))), then bias-corrected AdamW with decoupled weight
  // decay, none on norms and biases. The trainer computes the norm over every rank
  // (grad_norm.h).
  OptimizerStepStats step(float lr, float grad_norm);
  // The same for a model trained alone on one rank (tests, tools): the norm of its own
  // gradient.
  OptimizerStepStats step(float lr);
  int64_t steps_taken() const { return t_; }
  // Checkpointing: the first and second moments (F32: the flat table layout, or under ZeRO
  // the shard buffers' layout) and the step
  // count t that bias correction uses; a restore writes the moments and sets t.
  const Tensor& exp_avg() const { return m_; }
  const Tensor& exp_avg_sq() const { return v_; }
  void set_steps_taken(int64_t t) { t_ = t; }
  // The fp32 master weights where the backend keeps them (CUDA: params are bf16); empty on
  // the CPU, whose params are fp32 themselves. A checkpoint holds these, not the rounding.
  const Tensor& master() const { return master_; }
  // After the weights were replaced (--init): refresh the fp32 master copy.
  void reload_master();

 private:
  AdamW() = default;
  model::Model* model_ = nullptr;
  TrainOptions o_;
  Tensor m_, v_, master_;
  int64_t t_ = 0;
};

}  // namespace partrain::engine::train
