// One transformer block, pre-norm:
//   res2 = in + dropout(o_proj(attention(rope(qkv(norm1(in))))))
//   out  = res2 + dropout(mlp(norm2(res2)))
// mlp is GELU (gpt2), SwiGLU (llama) or a mixture of experts of either (moe.cc).
#include "engine/model/model.h"
#include "engine/model/model_internal.h"

namespace partrain::engine::model {

void Model::attention_core_forward(BlockActs& a) {
  const int C = o_.hidden, hd = C / o_.heads, KV = o_.kv_heads;
  const int QKV = (o_.heads + 2 * KV) * hd;
  const Tensor qkv = act(a.qkv);
  const AttentionDims d{B_, o_.seq_len, o_.heads, KV, hd, QKV, QKV};
  be_->attention_forward(act(a.att), act(a.lse), qkv, qkv.slice(static_cast<int64_t>(o_.heads) * hd, qkv.shape),
                         qkv.slice(static_cast<int64_t>(o_.heads + KV) * hd, qkv.shape), d);
}

void Model::block_forward(int l, const Tensor& in, const Tensor& out, BlockActs& a) {
  const BlockParams& p = bp_[static_cast<size_t>(l)];
  const int T = o_.seq_len, C = o_.hidden, H = o_.heads, KV = o_.kv_heads, hd = C / H;
  const int QKV = (H + 2 * KV) * hd;
  // Attention: norm, fused q/k/v projection, RoPE on q and k (llama), causal attention.
  const Tensor ln1 = act(a.ln1), qkv = act(a.qkv), att = act(a.att), branch = act(a.branch);
  norm_forward(ln1, a.ln1_mean, a.ln1_rstd, in, p.ln1_w, p.ln1_b);
  be_->matmul_forward(qkv, ln1, pspan(p.qkv_w, {QKV, C}), pspan(p.qkv_b, {QKV}), N_, C, QKV);
  if (o_.arch == Arch::kLlama) {
    const Tensor q = qkv.slice(0, qkv.shape), k = qkv.slice(static_cast<int64_t>(H) * hd, qkv.shape);
    be_->rope_forward(q, q, B_, T, H, hd, QKV, o_.rope_theta);
    be_->rope_forward(k, k, B_, T, KV, hd, QKV, o_.rope_theta);
  }
  attention_core_forward(a);
  // Output projection, dropout, residual.
  be_->matmul_forward(branch, att, pspan(p.o_w, {C, C}), pspan(p.o_b, {C}), N_, C, C);
  dropout(branch, l, 1);
  const Tensor res2 = act(a.res2);
  be_->residual_forward(res2, in, branch);
  // Feed-forward: norm, MLP (or experts), dropout, residual.
  const Tensor ln2 = act(a.ln2);
  norm_forward(ln2, a.ln2_mean, a.ln2_rstd, res2, p.ln2_w, p.ln2_b);
  mlp_forward(l, a, branch);
  dropout(branch, l, 2);
  be_->residual_forward(out, res2, branch);
}

void Model::mlp_forward(int l, BlockActs& a, const Tensor& out) {
  const BlockParams& p = bp_[static_cast<size_t>(l)];
  if (moe_[static_cast<size_t>(l)]) {
    moe_forward(l, *moe_[static_cast<size_t>(l)], act(a.ln2), out);
    return;
  }
  const int C = o_.hidden, F = o_.ffn_hidden;
  const Tensor fc = act(a.fc), h = act(a.act);
  if (o_.arch == Arch::kGpt2) {
    be_->matmul_forward(fc, act(a.ln2), pspan(p.fc_w, {F, C}), pspan(p.fc_b, {F}), N_, C, F);
    be_->gelu_forward(h, fc);
  } else {
    be_->matmul_forward(fc, act(a.ln2), pspan(p.fc_w, {2 * F, C}), Tensor{}, N_, C, 2 * F);
    be_->swiglu_forward(h, fc, N_, F);
  }
  be_->matmul_forward(out, h, pspan(p.proj_w, {C, F}), pspan(p.proj_b, {C}), N_, F, C);
}

void Model::mlp_backward(int l, BlockActs& a, const Tensor& dout, const Tensor& dln2) {
  const BlockParams& p = bp_[static_cast<size_t>(l)];
  if (moe_[static_cast<size_t>(l)]) {
    moe_backward(l, *moe_[static_cast<size_t>(l)], act(a.ln2), dout, dln2);
    return;
  }
  const int C = o_.hidden, F = o_.ffn_hidden;
  const bool gpt2 = o_.arch == Arch::kGpt2;
  const int FC = gpt2 ? F : 2 * F;
  const Tensor dact = act(dact_), dfc = act(dfc_);
  be_->zero(dact);
  be_->matmul_backward(dact, gspan(p.proj_w, {C, F}), gspan(p.proj_b, {C}), dout, act(a.act),
                       pspan(p.proj_w, {C, F}), N_, F, C);
  be_->zero(dfc);
  if (gpt2) {
    be_->gelu_backward(dfc, act(a.fc), dact);
  } else {
    be_->swiglu_backward(dfc, act(a.fc), dact, N_, F);
  }
  be_->matmul_backward(dln2, gspan(p.fc_w, {FC, C}), gspan(p.fc_b, {FC}), dfc, act(a.ln2),
                       pspan(p.fc_w, {FC, C}), N_, C, FC);
}

void Model::block_backward(int l, const Tensor& in, const Tensor& dres, BlockActs& a) {
  const BlockParams& p = bp_[static_cast<size_t>(l)];
  const int T = o_.seq_len, C = o_.hidden, H = o_.heads, KV = o_.kv_heads, hd = C / H;
  const int QKV = (H + 2 * KV) * hd;
  const Tensor dln = act(dln_);
  // Feed-forward branch: dres is d loss / d out; the residual passes it to res2 unchanged
  // and the MLP branch adds its part through norm2.
  Tensor dbranch = dropout_grad(dres, l, 2);
  be_->zero(dln);
  mlp_backward(l, a, dbranch, dln);
  norm_backward(dres, p.ln2_w, p.ln2_b, dln, act(a.res2), a.ln2_mean, a.ln2_rstd);
  // Attention branch. Selective recompute rebuilds the attention core here.
  dbranch = dropout_grad(dres, l, 1);
  if (o_.recompute == Recompute::kSelective) attention_core_forward(a);
  const Tensor datt = act(datt_), dqkv = act(dqkv_), qkv = act(a.qkv);
  be_->zero(datt);
  be_->matmul_backward(datt, gspan(p.o_w, {C, C}), gspan(p.o_b, {C}), dbranch, act(a.att),
                       pspan(p.o_w, {C, C}), N_, C, C);
  be_->zero(dqkv);
  const int64_t koff = static_cast<int64_t>(H) * hd, voff = static_cast<int64_t>(H + KV) * hd;
  const AttentionDims d{B_, T, H, KV, hd, QKV, QKV};
  be_->attention_backward(dqkv, dqkv.slice(koff, dqkv.shape), dqkv.slice(voff, dqkv.shape), datt,
                          act(a.att), act(a.lse), qkv, qkv.slice(koff, qkv.shape),
                          qkv.slice(voff, qkv.shape), d);
  if (o_.arch == Arch::kLlama) {
    const Tensor dk = dqkv.slice(koff, dqkv.shape);
    be_->rope_backward(dqkv, dqkv, B_, T, H, hd, QKV, o_.rope_theta);
    be_->rope_backward(dk, dk, B_, T, KV, hd, QKV, o_.rope_theta);
  }
  be_->zero(dln);
  be_->matmul_backward(dln, gspan(p.qkv_w, {QKV, C}), gspan(p.qkv_b, {QKV}), dqkv, act(a.ln1),
                       pspan(p.qkv_w, {QKV, C}), N_, C, QKV);
  norm_backward(dres, p.ln1_w, p.ln1_b, dln, in, a.ln1_mean, a.ln1_rstd);
}

}  // namespace partrain::engine::model
