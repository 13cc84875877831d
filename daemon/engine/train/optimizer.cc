// AdamW and clipping.
#include "engine/train/optimizer.h"


#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/train/grad_norm.h"

namespace partrain::engine::train {

Result<std::unique_ptr<AdamW>> AdamW::create(model::Model* model, const TrainOptions& o) {
  std::unique_ptr<AdamW> a(new AdamW());
  a->model_ = model;
  a->o_ = o;
  Backend& be = model->backend();
  // ZeRO (stage >= 1): the moments and the master copy of this rank's shard only.
  const int64_t n = model->shard().stage > 0 ? model->shard().numel() : model->num_params();
  const Shape s{std::max<int64_t>(1, n)};
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
  for (const model::ShardOptions::Run& r : model_->shard_runs()) {
    model_->backend().to_device(master_.slice(r.at, {r.end - r.begin}), host.data() + r.begin);
  }
}

OptimizerStepStats AdamW::step(float lr) {
  const GradSquares sq = local_grad_squares(*model_);
  return step(lr, static_cast<float>(std::sqrt(sq.dense + sq.experts)));
}

OptimizerStepStats AdamW::step(float lr, float grad_norm) {
  Backend& be = model_->backend();
  OptimizerStepStats st;
  const Tensor grads = model_->shard_grads();
  st.grad_norm = grad_norm;
  if (o_.grad_clip > 0.0f) {
    const float coef = o_.grad_clip / (st.grad_norm + 1e-6f);
    st.clip_scale = coef < 1.0f ? coef : 1.0f;
  }
  ++t_;
  AdamWArgs args;
  args.lr = lr;
  args.beta1 = o_.beta1;
  args.beta2 = o_.beta2;
  args.eps = o_.eps;
  args.t = t_;
  args.grad_scale = st.clip_scale;
  // Each run of the shard (the whole buffer unsharded) in one call: each tensor's part of it
  // is a range with its own weight decay (none on norms and biases).
  std::vector<Backend::AdamWRange> ranges;
  for (const model::ShardOptions::Run& r : model_->shard_runs()) {
    ranges.clear();
    for (const model::ParamSpec& v : model_->table().specs()) {
      const int64_t lo = std::max(r.begin, v.offset), hi = std::min(r.end, v.offset + v.numel());
      if (lo >= hi) continue;
      ranges.push_back({lo - r.begin, hi - r.begin, v.no_decay ? 0.0f : o_.weight_decay});
    }
    if (ranges.empty()) continue;
    const Shape len{r.end - r.begin};  // the run, in the shard buffers from r.at
    be.adamw_multi(model_->shard_params(r), master_.empty() ? Tensor{} : master_.slice(r.at, len),
                   m_.slice(r.at, len), v_.slice(r.at, len), grads.slice(r.at, len), ranges, args);
  }
  return st;
}

}  // namespace partrain::engine::train
