// ZB-H1's split backward (stage.h): backward-input computes every input gradient (and the
// norms' and embeddings' parameter gradients, which come out of the same kernels) and keeps
// each GEMM's output gradient; backward-weight then computes the GEMMs' weight and bias
// gradients from those and the GEMM inputs still held in the slot. The sum is exactly the
// whole backward's arithmetic, in two parts.
#include <fmt/format.h>

#include "engine/model/model.h"
#include "engine/model/model_internal.h"

namespace partrain::engine::model {

void Model::linear_backward(int site, const Tensor& dinp, int w, int b, Shape wshape, Shape bshape,
                            const Tensor& dout, const Tensor& inp, int N, int C, int OC) {
  if (part_ != BackwardPart::kInput) {
    be_->matmul_backward(dinp, gspan(w, wshape), gspan(b, bshape), dout, inp, pspan(w, wshape), N, C, OC);
    return;
  }
  be_->matmul_backward(dinp, Tensor{}, Tensor{}, dout, inp, pspan(w, wshape), N, C, OC);
  // dout lives in shared scratch (or is dres itself, which backward keeps changing): keep it.
  const Tensor kept = wgrad_dout_[static_cast<size_t>(site)].slice(0, dout.shape);
  be_->copy(kept, dout);
  deferred_.push_back(DeferredGrad{w, b, wshape, bshape, kept, inp, N, C, OC});
}

void Model::backward_weight(int slot) {
  use_slot(slot);
  for (const DeferredGrad& d : deferred_) {
    be_->matmul_backward(Tensor{}, gspan(d.w, d.wshape), gspan(d.b, d.bshape), d.dout, d.inp,
                         pspan(d.w, d.wshape), d.N, d.C, d.OC);
  }
  deferred_.clear();
}

Status Model::check_split_backward() const {
  if (o_.recompute != Recompute::kNone) {
    return Status::invalid("a split backward (ZB-H1) keeps every block's activations until the weight "
                           "gradient; set [model] recompute = \"none\" or use another schedule");
  }
  if (o_.moe_experts > 0) {
    return Status::invalid("a split backward (ZB-H1) is not implemented for mixture-of-experts "
                           "blocks; use sched=1f1b");
  }
  if (tp_.size > 1) return Status::invalid("a split backward (ZB-H1) runs without tensor parallelism");
  if (shard_.stage >= 2) {
    return Status::invalid(fmt::format(
        "a split backward (ZB-H1) finishes a block's weight gradient after the rest of its backward, but zero{} "
        "reduces each block's gradient as soon as its backward ends; use zero1 with zbh1, or sched=1f1b",
        shard_.stage));
  }
  return Status::ok();
}

// One kept output gradient per GEMM site of the stage: per block the MLP's projection
// [N, C], its first GEMM [N, FC], the attention projection [N, C] and q/k/v [N, QKV]; on
// the last stage the head [N, V].
Status Model::allocate_weight_grad_inputs() {
  const int64_t N = static_cast<int64_t>(max_batch_) * T_, C = o_.hidden;
  wgrad_dout_.assign(static_cast<size_t>(4 * (hi_ - lo_) + 1), Tensor{});
  auto get = [&](int s, int64_t cols) {
    return alloc_to(MemCategory::kActivations, be_->act_dtype(), {N, cols}, &wgrad_dout_[static_cast<size_t>(s)]);
  };
  for (int l = lo_; l < hi_; ++l) {
    PARTRAIN_RETURN_IF_ERROR(get(site(l, 0), C));
    PARTRAIN_RETURN_IF_ERROR(get(site(l, 1), lfc_));
    PARTRAIN_RETURN_IF_ERROR(get(site(l, 2), C));
    PARTRAIN_RETURN_IF_ERROR(get(site(l, 3), lqkv_));
  }
  if (last_stage()) PARTRAIN_RETURN_IF_ERROR(get(site(hi_, 0), lv_));
  deferred_.clear();
  return Status::ok();
}

}  // namespace partrain::engine::model
