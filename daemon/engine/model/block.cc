// One transformer block, pre-norm (under context parallelism every step but the attention
// core is per token on this rank's rows; the core runs over the cp group):
//   res2 = in + dropout(o_proj(attention(rope(qkv(norm1(in))))))
//   out  = res2 + dropout(mlp(norm2(res2)))
// mlp is GELU (gpt2), SwiGLU (llama) or a mixture of experts of either (moe.cc).
//
// Tensor parallel (tensor_parallel.h): qkv and the MLP's first GEMM are column-parallel
// (this rank's heads and ffn columns), o_proj and the MLP's last GEMM row-parallel; each
// branch enters its region after the norm and leaves it before dropout, so the column
// output feeds the row layer with no communication between them. A row-parallel bias is
// added once, after the reduction, to the rows each rank holds (Megatron's order); its
// gradient (from the full dout) is the same on every rank. Mixture-of-experts blocks keep
// their experts whole on every tp rank, which routes its own 1/tp of the tokens (moe_tp.cc).
#include "engine/model/model.h"
#include "engine/model/model_internal.h"

namespace partrain::engine::model {

void Model::attention_core_forward(BlockActs& a) {
  if (cp_.size > 1) return cp_attention_forward(a);  // over the cp group (context_attention.cc)
  const int hd = o_.hidden / o_.heads;
  const Tensor qkv = act(a.qkv);
  const AttentionDims d{B_, T_, lh_, lkv_, hd, lqkv_, lqkv_};
  be_->attention_forward(act(a.att), act(a.lse), qkv, qkv.slice(static_cast<int64_t>(lh_) * hd, qkv.shape),
                         qkv.slice(static_cast<int64_t>(lh_ + lkv_) * hd, qkv.shape), d);
}

void Model::block_forward(int l, const Tensor& in, const Tensor& out, BlockActs& a) {
  const BlockParams& p = bp_[static_cast<size_t>(l)];
  const int T = T_, C = o_.hidden, hd = C / o_.heads, QKV = lqkv_, Q = lq_;
  // Attention: norm, fused q/k/v projection, RoPE on q and k (llama), causal attention.
  const Tensor ln1 = ract(a.ln1), qkv = act(a.qkv), att = act(a.att);
  norm_forward(ln1, a.ln1_mean, a.ln1_rstd, in, p.ln1_w, p.ln1_b);
  const Tensor x = regions_.enter_forward(ln1, act(gathered_));
  be_->matmul_forward(qkv, x, pspan(p.qkv_w, {QKV, C}), pspan(p.qkv_b, {QKV}), N_, C, QKV);
  if (o_.arch == Arch::kLlama) {
    const Tensor q = qkv.slice(0, qkv.shape), k = qkv.slice(static_cast<int64_t>(lh_) * hd, qkv.shape);
    be_->rope_forward(q, q, B_, T, lh_, hd, QKV, o_.rope_theta, chunk_pos_);  // at global positions
    be_->rope_forward(k, k, B_, T, lkv_, hd, QKV, o_.rope_theta, chunk_pos_);
  }
  attention_core_forward(a);
  // Output projection (a partial sum under tp), leaving the region, dropout, residual.
  const Tensor partial = regions_.active() && tp_.sp ? act(partial_) : act(a.branch);
  const bool tp = regions_.active();  // the bias after the reduction under tp
  be_->matmul_forward(partial, att, pspan(p.o_w, {C, Q}), tp ? Tensor{} : pspan(p.o_b, {C}), N_, Q, C);
  Tensor branch = regions_.leave_forward(partial, ract(a.branch));
  if (tp) add_bias_rows(branch, p.o_b);
  dropout(branch, l, 1);
  // The residual and the feed-forward's norm (one op: a backend may fuse them). Then the MLP
  // (or experts), leaving the region, dropout, residual. Experts under tp take no region:
  // each rank routes its own tokens (moe_tp.cc).
  const Tensor res2 = ract(a.res2), ln2 = ract(a.ln2);
  residual_norm_forward(res2, ln2, a.ln2_mean, a.ln2_rstd, in, branch, p.ln2_w, p.ln2_b);
  if (tp && moe_[static_cast<size_t>(l)]) {
    branch = ract(a.branch);
    moe_tp_forward(l, *moe_[static_cast<size_t>(l)], ln2, branch);
  } else {
    mlp_forward(l, a, regions_.enter_forward(ln2, act(gathered_)), partial);
    branch = regions_.leave_forward(partial, ract(a.branch));
    if (tp) add_bias_rows(branch, p.proj_b);
  }
  dropout(branch, l, 2);
  be_->residual_forward(out, res2, branch);
}

void Model::mlp_forward(int l, BlockActs& a, const Tensor& x, const Tensor& out) {
  const BlockParams& p = bp_[static_cast<size_t>(l)];
  if (moe_[static_cast<size_t>(l)]) {
    moe_forward(l, *moe_[static_cast<size_t>(l)], x, out);
    return;
  }
  const int C = o_.hidden, F = lf_;
  const Tensor fc = act(a.fc), h = act(a.act);
  if (o_.arch == Arch::kGpt2) {  // fc = x W^T + b, h = gelu(fc)
    be_->matmul_gelu_forward(h, fc, x, pspan(p.fc_w, {F, C}), pspan(p.fc_b, {F}), N_, C, F);
  } else {
    // gate and up: this rank's columns of each, consecutive (one [2F, C] GEMM).
    be_->matmul_forward(fc, x, pspan(p.fc_w, {2 * F, C}), Tensor{}, N_, C, 2 * F);
    be_->swiglu_forward(h, fc, N_, F);
  }
  be_->matmul_forward(out, h, pspan(p.proj_w, {C, F}),
                      regions_.active() ? Tensor{} : pspan(p.proj_b, {C}), N_, F, C);
}

void Model::mlp_backward(int l, BlockActs& a, const Tensor& x, const Tensor& dout, const Tensor& dx) {
  const BlockParams& p = bp_[static_cast<size_t>(l)];
  if (moe_[static_cast<size_t>(l)]) {
    moe_backward(l, *moe_[static_cast<size_t>(l)], x, dout, dx);
    return;
  }
  const int C = o_.hidden, F = lf_, FC = lfc_;
  const bool gpt2 = o_.arch == Arch::kGpt2;
  const Tensor dact = act(dact_), dfc = act(dfc_);
  if (gpt2 && part_ != BackwardPart::kInput) {
    // The projection's backward and GELU's in one op (dfc written; dact its scratch).
    be_->matmul_gelu_backward(dfc, gspan(p.proj_w, {C, F}), gspan(p.proj_b, {C}), dout, act(a.act),
                              pspan(p.proj_w, {C, F}), act(a.fc), dact, N_, F, C);
  } else {
    be_->zero(dact);
    linear_backward(site(l, 0), dact, p.proj_w, p.proj_b, {C, F}, {C}, dout, act(a.act), N_, F, C);
    be_->zero(dfc);
    if (gpt2) {
      be_->gelu_backward(dfc, act(a.fc), dact);
    } else {
      be_->swiglu_backward(dfc, act(a.fc), dact, N_, F);
    }
  }
  linear_backward(site(l, 1), dx, p.fc_w, p.fc_b, {FC, C}, {FC}, dfc, x, N_, C, FC);
}

void Model::block_backward(int l, const Tensor& in, const Tensor& dres, BlockActs& a) {
  const BlockParams& p = bp_[static_cast<size_t>(l)];
  const int T = T_, C = o_.hidden, H = lh_, KV = lkv_, hd = C / o_.heads;
  const int QKV = lqkv_, Q = lq_;
  const Tensor dx = act(dln_), drows = ract(drows_), dfull = act(dfull_);
  // Feed-forward branch: dres is d loss / d out; the residual passes it to res2 unchanged
  // and the MLP branch adds its part through norm2. Under sp the norm's rows are gathered
  // again (only they were kept) and the gradients move through the conjugate regions.
  if (regions_.active() && moe_[static_cast<size_t>(l)]) {  // experts under tp: this rank's tokens
    const Tensor dln2 = moe_tp_backward(l, *moe_[static_cast<size_t>(l)], ract(a.ln2), dropout_grad(dres, l, 2), dx);
    norm_backward(dres, p.ln2_w, p.ln2_b, dln2, ract(a.res2), a.ln2_mean, a.ln2_rstd);
  } else {
    const Tensor dbranch = regions_.leave_backward(dropout_grad(dres, l, 2), dfull);
    be_->zero(dx);
    mlp_backward(l, a, regions_.enter_forward(ract(a.ln2), act(gathered_)), dbranch, dx);
    norm_backward(dres, p.ln2_w, p.ln2_b, regions_.enter_backward(dx, drows), ract(a.res2),
                  a.ln2_mean, a.ln2_rstd);
  }
  // Attention branch. Selective recompute rebuilds the attention core here.
  const Tensor dbranch = regions_.leave_backward(dropout_grad(dres, l, 1), dfull);
  if (o_.recompute == Recompute::kSelective) attention_core_forward(a);
  const Tensor datt = act(datt_), dqkv = act(dqkv_), qkv = act(a.qkv);
  be_->zero(datt);
  linear_backward(site(l, 2), datt, p.o_w, p.o_b, {C, Q}, {C}, dbranch, act(a.att), N_, Q, C);
  be_->zero(dqkv);
  const int64_t koff = static_cast<int64_t>(H) * hd, voff = static_cast<int64_t>(H + KV) * hd;
  if (cp_.size > 1) {
    cp_attention_backward(a, dqkv, datt);
  } else {
    const AttentionDims d{B_, T, H, KV, hd, QKV, QKV};
    be_->attention_backward(dqkv, dqkv.slice(koff, dqkv.shape), dqkv.slice(voff, dqkv.shape), datt,
                            act(a.att), act(a.lse), qkv, qkv.slice(koff, qkv.shape),
                            qkv.slice(voff, qkv.shape), d);
  }
  if (o_.arch == Arch::kLlama) {
    const Tensor dk = dqkv.slice(koff, dqkv.shape);
    be_->rope_backward(dqkv, dqkv, B_, T, H, hd, QKV, o_.rope_theta, chunk_pos_);
    be_->rope_backward(dk, dk, B_, T, KV, hd, QKV, o_.rope_theta, chunk_pos_);
  }
  be_->zero(dx);
  linear_backward(site(l, 3), dx, p.qkv_w, p.qkv_b, {QKV, C}, {QKV}, dqkv,
                  regions_.enter_forward(ract(a.ln1), act(gathered_)), N_, C, QKV);
  norm_backward(dres, p.ln1_w, p.ln1_b, regions_.enter_backward(dx, drows), in, a.ln1_mean,
                a.ln1_rstd);
}

}  // namespace partrain::engine::model
