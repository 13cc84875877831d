// Context parallelism's part of the model (context_parallel.h): this rank's rows of each
// sequence, the attention core over the cp group, the learned positions and the dropout
// runs at global positions.
//
// Attention core, forward: pack this rank's keys and values ([N, 2 KV hd]: per row the KV
// heads' keys, then their values) from the fused qkv buffer; start out at 0 and lse at
// -inf; for every cp rank's block (the ContextComm brings them), merge the attention of
// this rank's queries over the block's keys into (out, lse) (engine/positions.h says which
// keys each query sees). Backward: the same blocks again; each block's call adds this
// rank's part of dq into dqkv and the block's dK, dV into the block's gradient, which the
// ContextComm sums back on the rank that holds the block; this rank's own sum lands in the
// K/V columns of dqkv.
#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "engine/model/model.h"
#include "engine/model/model_internal.h"

namespace partrain::engine::model {

// The packed K/V block, its gradient and the position of every row (learned positions),
// as workspace: none of them outlives a block's forward or backward.
Status Model::cp_allocate(int64_t N) {
  const int64_t kvw = 2 * static_cast<int64_t>(lkv_) * (o_.hidden / o_.heads);
  PARTRAIN_RETURN_IF_ERROR(alloc_to(MemCategory::kWorkspace, be_->act_dtype(), {N, kvw}, &kv_));
  PARTRAIN_RETURN_IF_ERROR(alloc_to(MemCategory::kWorkspace, be_->act_dtype(), {N, kvw}, &dkv_));
  if (wpe_ >= 0) {
    PARTRAIN_RETURN_IF_ERROR(alloc_to(MemCategory::kWorkspace, DType::kI32, {N}, &cp_pos_));
    std::vector<int32_t> pos(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) pos[static_cast<size_t>(n)] = chunk_pos_.at(static_cast<int>(n % T_));
    be_->to_device_i32(cp_pos_, pos.data());
  }
  return Status::ok();
}

Status Model::set_context_comm(ContextComm* comm) {
  cp_comm_ = comm;
  if (comm == nullptr || cp_.size == 1) return Status::ok();
  const int blocks = comm->scratch_blocks();
  if (blocks < 0 || blocks > 4 * cp_.size + 8) {
    return Status::invalid(fmt::format("the context plugin asks for {} scratch blocks with cp {}", blocks, cp_.size));
  }
  if (!cp_scratch_.empty()) return Status::internal("set_context_comm: called twice");
  if (blocks == 0) return Status::ok();
  const Shape s{static_cast<int64_t>(blocks) * kv_.shape[0], kv_.shape[1]};
  Result<Tensor> t = be_->alloc(MemCategory::kWorkspace, be_->act_dtype(), s);
  if (!t) return t.status();
  cp_scratch_ = *t;
  owned_.push_back(cp_scratch_);
  return Status::ok();
}

MicroBatch Model::local_rows(const MicroBatch& batch) {
  if (cp_.size == 1) return batch;
  const size_t n = static_cast<size_t>(B_) * T_;
  cp_inputs_.resize(n);
  cp_targets_.resize(n);
  for (int b = 0; b < B_; ++b) {
    for (int t = 0; t < T_; ++t) {
      const size_t from = static_cast<size_t>(b) * o_.seq_len + static_cast<size_t>(chunk_pos_.at(t));
      const size_t to = static_cast<size_t>(b) * T_ + t;
      cp_inputs_[to] = batch.inputs[from];
      cp_targets_[to] = batch.targets[from];
    }
  }
  MicroBatch out = batch;
  out.inputs = cp_inputs_.data();
  out.targets = cp_targets_.data();
  return out;
}

void Model::for_each_logical_run(int row0, int rows, const std::function<void(int, int, uint64_t)>& f) const {
  const uint64_t T = static_cast<uint64_t>(o_.seq_len);
  if (cp_.size == 1) {  // the rows of consecutive whole sequences: one run
    f(row0, rows, batch_.first_sample * T + static_cast<uint64_t>(row0));
    return;
  }
  for (int n = row0; n < row0 + rows;) {
    const int b = n / T_, t = n % T_;
    const int chunk_end = t < chunk_pos_.run ? chunk_pos_.run : T_;
    const int count = std::min(chunk_end - t, row0 + rows - n);
    f(n, count, (batch_.first_sample + static_cast<uint64_t>(b)) * T + static_cast<uint64_t>(chunk_pos_.at(t)));
    n += count;
  }
}

// x0 [N, C] += wpe rows at the global positions (cp without tp; tp's vocabulary-parallel
// lookup adds them itself, from the same positions).
void Model::positions_forward(const Tensor& x0) {
  if (wpe_ < 0) return;
  const int C = o_.hidden;
  const Tensor scratch = act(dln_);  // free until the first block's backward
  be_->gather_rows(scratch, param(wpe_), cp_pos_.slice(0, {N_}), Tensor{}, N_, C);
  be_->accumulate(x0, scratch);
}

// d wpe += dx [N, C] at the global positions: one call per sequence (its positions are
// distinct, as scatter_add_rows needs).
void Model::positions_backward(const Tensor& dx) {
  if (wpe_ < 0) return;
  const int C = o_.hidden;
  const Tensor positions = regions_.active() ? pos_ : cp_pos_;
  for (int b = 0; b < B_; ++b) {
    const int64_t r0 = static_cast<int64_t>(b) * T_;
    be_->scatter_add_rows(grad(wpe_), dx.slice(r0 * C, {T_, C}), positions.slice(r0, {T_}), Tensor{}, T_, C);
  }
}

void Model::cp_attention_forward(BlockActs& a) {
  const int hd = o_.hidden / o_.heads, kvw = 2 * lkv_ * hd;
  const Tensor qkv = act(a.qkv), att = act(a.att), lse = act(a.lse);
  const Tensor kv = kv_.slice(0, {N_, kvw});
  be_->copy_columns(kv, kvw, qkv.slice(static_cast<int64_t>(lh_) * hd, qkv.shape), lqkv_, N_, kvw);
  be_->zero(att);
  be_->fill(lse, -INFINITY);
  cp_comm_->forward(kv, cp_scratch_, [&](int source, const Tensor& block) {
    const AttentionBlockDims d{B_, T_, T_, lh_, lkv_, hd, lqkv_, kvw, chunk_pos_,
                               context_positions(o_.seq_len, source, cp_.size)};
    be_->attention_block_forward(att, lse, qkv, block, block.slice(static_cast<int64_t>(lkv_) * hd, block.shape), d);
  });
}

void Model::cp_attention_backward(BlockActs& a, const Tensor& dqkv, const Tensor& datt) {
  const int hd = o_.hidden / o_.heads, kvw = 2 * lkv_ * hd;
  const int64_t v_at = static_cast<int64_t>(lkv_) * hd;
  const Tensor qkv = act(a.qkv), att = act(a.att), lse = act(a.lse);
  const Tensor kv = kv_.slice(0, {N_, kvw}), dkv = dkv_.slice(0, {N_, kvw});
  be_->copy_columns(kv, kvw, qkv.slice(static_cast<int64_t>(lh_) * hd, qkv.shape), lqkv_, N_, kvw);
  be_->zero(dkv);
  cp_comm_->backward(kv, dkv, cp_scratch_, [&](int source, const Tensor& block, const Tensor& dblock) {
    const AttentionBlockDims d{B_, T_, T_, lh_, lkv_, hd, lqkv_, kvw, chunk_pos_,
                               context_positions(o_.seq_len, source, cp_.size)};
    be_->attention_block_backward(dqkv, dblock, dblock.slice(v_at, dblock.shape), datt, att, lse, qkv, block,
                                  block.slice(v_at, block.shape), d);
  });
  // dqkv's K/V columns were zero: they take the summed gradient of this rank's block.
  be_->copy_columns(dqkv.slice(static_cast<int64_t>(lh_) * hd, dqkv.shape), lqkv_, dkv, kvw, N_, kvw);
}

}  // namespace partrain::engine::model
