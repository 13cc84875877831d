// AdamW, clipping and the learning-rate schedule.
#include "engine/train/optimizer.h"

#include <cmath>
#include <vector>

namespace partrain::engine::train {

float lr_at(const TrainOptions& o, int64_t step) {
  if (o.warmup_steps > 0 && step < o.warmup_steps) {
    return o.lr * static_cast<float>(step + 1) / static_cast<float>(o.warmup_steps);
  }
  const int64_t decay_steps = o.steps - o.warmup_steps > 1 ? o.steps - o.warmup_steps : 1;
  double progress = static_cast<double>(step - o.warmup_steps) / static_cast<double>(decay_steps);
  if (progress > 1.0) progress = 1.0;
  const double kPi = 3.14159265358979323846;
  return static_cast<float>(o.min_lr + (o.lr - o.min_lr) * 0.5 * (1.0 + std::cos(kPi * progress)));
}

Result<std::unique_ptr<AdamW>> AdamW::create(model::Model* model, const TrainOptions& o) {
  std::unique_ptr<AdamW> a(new AdamW());
  a->model_ = model;
  a->o_ = o;
  Backend& be = model->backend();
  const Shape s{model->num_params()};
  for (Tensor* t : {&a->m_, &a->v_}) {
    Result<Tensor> r = be.alloc(MemCategory::kOptimizer, DType::kF32, s);
    if (!r) return r.status();
    *t = *r;
  }
  if (be.needs_master_weights()) {
    Result<Tensor> r = be.alloc(MemCategory::kOptimizer, DType::kF32, s);
    if (!r) return r.status();
    a->master_ = *r;
    a->reload_master();
  }
  return a;
}

AdamW::~AdamW() {
  Backend& be = model_->backend();
  be.release(&m_);
  be.release(&v_);
  be.release(&master_);
}

void AdamW::reload_master() {
  if (master_.empty()) return;
  const std::vector<float> host = model_->params_to_host();
  model_->backend().to_device(master_, host.data());
}

OptimizerStepStats AdamW::step(float lr) {
  Backend& be = model_->backend();
  OptimizerStepStats st;
  st.grad_norm = static_cast<float>(std::sqrt(be.sum_squares(model_->grads())));
  if (o_.grad_clip > 0.0f) {
    const float coef = o_.grad_clip / (st.grad_norm + 1e-6f);
    st.clip_scale = coef < 1.0f ? coef : 1.0f;
  }
  ++t_;
  const auto& specs = model_->table().specs();
  for (size_t i = 0; i < specs.size(); ++i) {
    const model::ParamSpec& v = specs[i];
    AdamWArgs args;
    args.lr = lr;
    args.beta1 = o_.beta1;
    args.beta2 = o_.beta2;
    args.eps = o_.eps;
    args.weight_decay = specs[i].no_decay ? 0.0f : o_.weight_decay;
    args.t = t_;
    args.grad_scale = st.clip_scale;
    be.adamw(model_->param(static_cast<int>(i)),
             master_.empty() ? Tensor{} : master_.slice(v.offset, v.shape),
             m_.slice(v.offset, v.shape), v_.slice(v.offset, v.shape),
             model_->grad(static_cast<int>(i)), args);
  }
  return st;
}

}  // namespace partrain::engine::train
