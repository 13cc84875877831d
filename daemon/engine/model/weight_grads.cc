// ZB-H1's split backward (stage.h): backward-input computes every input gradient (and the
// norms' and embeddings' parameter gradients, which come out of the same kernels) and keeps
// each GEMM's output gradient; backward-weight then computes the GEMMs' weight and bias
// gradients from those and the GEMM inputs still held in the slot. The sum is exactly the
// whole backward's arithmetic, in two parts.
//
// A GEMM input that lives in a buffer the slots share is kept too: under recompute the
// block's activations are rebuilt into shared buffers, and under tensor parallelism the
// column-parallel GEMMs read the gathered sequence (a shared region buffer); another
// micro-batch's backward-input may overwrite both before this one's backward-weight. MoE
// experts compute their weight gradients in backward-input (their rows are routed per
// micro-batch), so only the dense GEMMs are split.
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
  Tensor kept_inp = inp;
  if (!wgrad_inp_.empty()) {
    kept_inp = wgrad_inp_[static_cast<size_t>(site)].slice(0, inp.shape);
    be_->copy(kept_inp, inp);
  }
  deferred_.push_back(DeferredGrad{w, b, wshape, bshape, kept, kept_inp, N, C, OC});
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
  const size_t sites = static_cast<size_t>(4 * (hi_ - lo_) + 1);
  wgrad_dout_.assign(sites, Tensor{});
  const bool keep_inputs = o_.recompute != Recompute::kNone || tp_.size > 1;
  wgrad_inp_.assign(keep_inputs ? sites : 0, Tensor{});
  // Site s keeps a [N, out] output gradient and, where needed, its [N, in] input.
  auto get = [&](int s, int64_t out, int64_t in) -> Status {
    const size_t k = static_cast<size_t>(s);
    PARTRAIN_RETURN_IF_ERROR(alloc_to(MemCategory::kActivations, be_->act_dtype(), {N, out}, &wgrad_dout_[k]));
    if (keep_inputs) PARTRAIN_RETURN_IF_ERROR(alloc_to(MemCategory::kActivations, be_->act_dtype(), {N, in}, &wgrad_inp_[k]));
    return Status::ok();
  };
  for (int l = lo_; l < hi_; ++l) {
    PARTRAIN_RETURN_IF_ERROR(get(site(l, 0), C, lf_));     // MLP projection: act -> residual
    PARTRAIN_RETURN_IF_ERROR(get(site(l, 1), lfc_, C));    // MLP first GEMM: norm -> fc
    PARTRAIN_RETURN_IF_ERROR(get(site(l, 2), C, lq_));     // attention projection: att -> residual
    PARTRAIN_RETURN_IF_ERROR(get(site(l, 3), lqkv_, C));   // q/k/v: norm -> qkv
  }
  if (last_stage()) PARTRAIN_RETURN_IF_ERROR(get(site(hi_, 0), lv_, C));
  deferred_.clear();
  return Status::ok();
}

}  // namespace partrain::engine::model
