// Tensor parallel's buffers, and the vocabulary-parallel embedding and cross-entropy
// (tensor_parallel.h): rank r holds vocabulary rows [v0, v0 + lv) of the token embedding
// (and of the head, tied or not) and the logits of those columns only.
//
// Embedding: each rank looks up the tokens it holds (the others give 0 rows), the sum over
// the group leaves the region, and the learned positions are added to the rows held.
// Cross-entropy, Megatron's way, without gathering the logits: the row max, the sum of
// exp(z - max) and the target's logit are each reduced over the group ([N] floats), so every
// rank has the exact log-sum-exp and loss; backward gives each rank its columns of
// softmax - onehot. The [N] statistics are computed on the host from the rank's logits
// (fp32: Model::create refuses tp on other backends) and reduced as backend tensors (device
// memory on GPU ranks), which the tp group's collectives take.
#include <cmath>

#include "engine/model/model.h"

namespace partrain::engine::model {

Status Model::tp_allocate(int64_t N, int64_t C) {
  using MC = MemCategory;
  const DType ad = be_->act_dtype();
  auto get = [&](MC c, DType d, Shape s, Tensor* out) -> Status {
    Result<Tensor> t = alloc(c, d, s);
    if (!t) return t.status();
    *out = *t;
    return Status::ok();
  };
  if (tp_.sp) {  // the gathered input, the partial output and their gradients, shared
    PARTRAIN_RETURN_IF_ERROR(get(MC::kWorkspace, ad, {N, C}, &gathered_));
    PARTRAIN_RETURN_IF_ERROR(get(MC::kWorkspace, ad, {N, C}, &partial_));
    PARTRAIN_RETURN_IF_ERROR(get(MC::kWorkspace, ad, {N, C}, &dfull_));
    PARTRAIN_RETURN_IF_ERROR(get(MC::kWorkspace, ad, {N / tp_.size, C}, &drows_));
    PARTRAIN_RETURN_IF_ERROR(get(MC::kWorkspace, be_->grad_dtype(), {2 * C}, &norm_scratch_));
  }
  // tok_local_ and tok_mask_ belong to a micro-batch: one per activation slot (model.cc).
  for (Tensor* t : {&iota_, &pos_, &ce_targets_, &fix_idx_, &zeros_}) {
    PARTRAIN_RETURN_IF_ERROR(get(MC::kActivations, DType::kI32, {N}, t));
  }
  PARTRAIN_RETURN_IF_ERROR(get(MC::kActivations, DType::kF32, {N}, &fix_w_));
  PARTRAIN_RETURN_IF_ERROR(get(MC::kWorkspace, DType::kF32, {2 * N}, &vp_stats_));
  return Status::ok();
}

// This rank's token ids (0 where another rank holds the token) and their 0/1 mask, the
// row indices 0..N-1 and the positions; the targets are kept for the loss.
void Model::vp_prepare(const MicroBatch& batch) {
  const size_t N = static_cast<size_t>(N_);
  std::vector<int32_t> local(N), iota(N), pos(N);
  std::vector<float> mask(N);
  host_i_.assign(batch.targets, batch.targets + N);
  for (size_t n = 0; n < N; ++n) {
    const int64_t t = batch.inputs[n] - v0_;
    const bool mine = t >= 0 && t < lv_;
    local[n] = mine ? static_cast<int32_t>(t) : 0;
    mask[n] = mine ? 1.0f : 0.0f;
    iota[n] = static_cast<int32_t>(n);
    pos[n] = static_cast<int32_t>(chunk_pos_.at(static_cast<int>(n % static_cast<size_t>(T_))));  // global position
  }
  be_->to_device_i32(tok_local_.slice(0, {N_}), local.data());
  be_->to_device(tok_mask_.slice(0, {N_}), mask.data());
  be_->to_device_i32(iota_.slice(0, {N_}), iota.data());
  be_->to_device_i32(pos_.slice(0, {N_}), pos.data());
}

// The bias as R copies of its row (gather_rows of row 0), then added: dln_ is free while
// forward (and a recompute inside backward) runs a block.
void Model::add_bias_rows(const Tensor& rows, int b) {
  if (b < 0) return;
  const int C = o_.hidden;
  const Tensor scratch = ract(dln_);
  be_->gather_rows(scratch, pspan(b, {1, C}), zeros_.slice(0, {R_}), Tensor{}, R_, C);
  be_->accumulate(rows, scratch);
}

void Model::vp_embedding_forward(const Tensor& x0) {
  const int C = o_.hidden;
  const Tensor partial = tp_.sp ? act(partial_) : x0;
  be_->gather_rows(partial, param(wte_), tok_local_.slice(0, {N_}), tok_mask_.slice(0, {N_}), N_, C);
  regions_.leave_forward(partial, x0);
  if (wpe_ >= 0) {  // positions: after the sum, on the rows this rank holds
    const Tensor scratch = ract(dln_);
    be_->gather_rows(scratch, param(wpe_), pos_.slice(tp_row0(), {R_}), Tensor{}, R_, C);
    be_->accumulate(x0, scratch);
  }
}

void Model::vp_embedding_backward(const Tensor& demb) {
  const int T = T_, C = o_.hidden;
  const Tensor dfull = regions_.leave_backward(demb, act(dfull_));
  // Every rank has the whole d x0: the positions' gradient is the same on each.
  if (cp_.size > 1) {
    positions_backward(dfull);
  } else if (wpe_ >= 0) {
    be_->embedding_backward(Tensor{}, grad(wpe_), dfull, tokens_.slice(0, {N_}), B_, T, C);
  }
  // The rows of the tokens this rank holds; the others' rows are zeroed (mask) and land on
  // local row 0, adding nothing.
  const Tensor masked = act(dln_);
  be_->gather_rows(masked, dfull, iota_.slice(0, {N_}), tok_mask_.slice(0, {N_}), N_, C);
  be_->embedding_backward(grad(wte_), Tensor{}, masked, tok_local_.slice(0, {N_}), B_, T, C);
}

double Model::vp_loss_forward(const Tensor& logits) {
  const size_t N = static_cast<size_t>(N_), V = static_cast<size_t>(lv_);
  host_f_.resize(N * V + 3 * N);
  float* z = host_f_.data();
  float* mx = z + N * V;   // [N] row max
  float* se = mx + N;      // [2N] sum of exp(z - max), target logit
  be_->to_host(z, logits);
  for (size_t n = 0; n < N; ++n) {
    float m = z[n * V];
    for (size_t i = 1; i < V; ++i) m = z[n * V + i] > m ? z[n * V + i] : m;
    mx[n] = m;
  }
  TensorComm* comm = regions_.comm();
  const Tensor max_stat = vp_stats_.slice(0, {N_}), sum_stats = vp_stats_.slice(0, {2 * N_});
  be_->to_device(max_stat, mx);
  comm->all_reduce_max(max_stat);
  be_->to_host(mx, max_stat);
  for (size_t n = 0; n < N; ++n) {
    double s = 0.0;
    for (size_t i = 0; i < V; ++i) s += std::exp(static_cast<double>(z[n * V + i] - mx[n]));
    se[n] = static_cast<float>(s);
    const int64_t t = host_i_[n] - v0_;
    se[N + n] = host_i_[n] >= 0 && t >= 0 && t < lv_ ? z[n * V + static_cast<size_t>(t)] : 0.0f;
  }
  be_->to_device(sum_stats, se);
  comm->all_reduce_sum(sum_stats);
  be_->to_host(se, sum_stats);
  // The exact log-sum-exp for backward, and the loss (as the single-rank kernel: float).
  std::vector<float> lse(N);
  double sum = 0.0;
  for (size_t n = 0; n < N; ++n) {
    const double l = mx[n] + std::log(static_cast<double>(se[n]));
    lse[n] = static_cast<float>(l);
    if (host_i_[n] >= 0) sum += static_cast<float>(l - se[N + n]);
  }
  be_->to_device(lse_.slice(0, {N_}), lse.data());
  return sum;
}

void Model::vp_loss_backward(const Tensor& dlogits, const Tensor& dloss) {
  const size_t N = static_cast<size_t>(N_);
  // The kernel adds dloss * (softmax - onehot(target)); a row whose target another rank
  // holds gets target 0 here and its -dloss at column 0 added back.
  std::vector<int32_t> target(N), idx(N);
  std::vector<float> fix(N);
  for (size_t n = 0; n < N; ++n) {
    const int64_t t = host_i_[n] - v0_;
    const bool counted = host_i_[n] >= 0, mine = counted && t >= 0 && t < lv_;
    target[n] = !counted ? -1 : mine ? static_cast<int32_t>(t) : 0;
    fix[n] = counted && !mine ? 1.0f : 0.0f;
    idx[n] = static_cast<int32_t>(n * static_cast<size_t>(lv_));
  }
  be_->to_device_i32(ce_targets_.slice(0, {N_}), target.data());
  be_->to_device_i32(fix_idx_.slice(0, {N_}), idx.data());
  be_->to_device(fix_w_.slice(0, {N_}), fix.data());
  be_->crossentropy_backward(dlogits, logits_.slice(0, {N_, lv_}), lse_.slice(0, {N_}),
                             ce_targets_.slice(0, {N_}), dloss, N_, lv_);
  be_->scatter_add_rows(dlogits.slice(0, {static_cast<int64_t>(N_) * lv_, 1}), dloss.slice(0, {N_, 1}),
                        fix_idx_.slice(0, {N_}), fix_w_.slice(0, {N_}), N_, 1);
}

}  // namespace partrain::engine::model
