// CPU reference kernels, fp32, llm.c style: plain functions over raw row-major arrays.
// They are the numerical definition of every layer: the CUDA kernels are tested against
// them, and they are tested against finite differences and an independent PyTorch reference.
//
// Conventions (shared with daemon/engine/cuda/):
//  - Activations are [N, C] row-major with N = B*T tokens (token n = b*T + t).
//  - Every *_backward ACCUMULATES (+=) into each gradient output, so parameter gradients
//    sum over micro-batches and residual branches without extra copies; callers zero
//    buffers when they want a fresh gradient. A null gradient pointer means "not needed".
//  - Linear weights are [OC, C] (PyTorch nn.Linear layout): out = inp @ w^T + bias.
//  - GEMMs go through OpenBLAS (cblas_sgemm); loops are OpenMP-parallel over rows.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/positions.h"

namespace partrain::engine::cpu {

// out[n,:] = wte[tokens[n],:] (+ wpe[t,:] when wpe is non-null; t = n % T).
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int B, int T, int C);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int B, int T, int C);

// y = (x - mean) * rstd * w + b over each row of C; mean/rstd [N] kept for backward.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, int N, int C, float eps);
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, int N, int C);

// y = x * rstd * w with rstd = 1/sqrt(mean(x^2) + eps); rstd [N] kept for backward.
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int N, int C,
                     float eps);
void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                      const float* rstd, int N, int C);

// out[N,OC] = inp[N,C] @ w[OC,C]^T (+ bias[OC] when non-null).
void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int N, int C,
                    int OC);
void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                     const float* w, int N, int C, int OC);

// Causal self-attention with grouped-query heads, flash-style: only the per-row
// log-sum-exp of the scaled scores is kept (lse [B,H,T]), backward recomputes the
// probabilities from it. q is [B,T,H,hd] read with row stride q_stride (elements between
// consecutive tokens), k and v [B,T,KV,hd] with row stride kv_stride, so a packed qkv
// buffer works in place. Query head h attends with kv head h / (H / KV).
// out is [B,T,H*hd] (contiguous). Scale 1/sqrt(hd).
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       int B, int T, int H, int KV, int hd, int q_stride, int kv_stride);
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                        const float* lse, const float* q, const float* k, const float* v, int B,
                        int T, int H, int KV, int hd, int q_stride, int kv_stride);

// GELU, tanh approximation (GPT-2's).
void gelu_forward(float* out, const float* inp, size_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);

// SwiGLU: inp [N, 2F] holds gate (first F columns) then up (last F);
// out[N,F] = silu(gate) * up.
void swiglu_forward(float* out, const float* inp, int N, int F);
void swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F);

// Rotary position embedding in Hugging Face's rotate_half convention (pairs i and i+hd/2),
// applied to x [B,T,heads,hd] with row stride `stride`; out may alias inp. Row t of each
// sequence is at position pos.at(t) (engine/positions.h; t itself by default).
// backward applies the inverse rotation to dout.
void rope_forward(float* out, const float* inp, int B, int T, int heads, int hd, int stride,
                  float theta, const SeqPositions& pos = {});
void rope_backward(float* dinp, const float* dout, int B, int T, int heads, int hd, int stride,
                   float theta, const SeqPositions& pos = {});

// Context-parallel attention, one block of keys at a time (attention_block.cc): this rank's
// Tq query rows per sequence (at positions q_pos) against Tk key/value rows (at k_pos) of
// one cp rank, causal by position. Strides and heads as attention_forward.
struct AttentionBlockShape {
  int B = 0, Tq = 0, Tk = 0, H = 0, KV = 0, hd = 0, q_stride = 0, kv_stride = 0;
  SeqPositions q_pos, k_pos;
};
// Merges the block into the running result: out [B,Tq,H*hd] and lse [B,H,Tq] hold the
// attention over the blocks so far (start: out 0, lse -inf), and become that over those
// blocks and this one (online softmax: lse' = log(e^lse + e^lse_b), out' = out e^(lse-lse')
// + out_b e^(lse_b-lse')). After every block, in any order, they are the whole sequence's.
void attention_block_forward(float* out, float* lse, const float* q, const float* k,
                             const float* v, const AttentionBlockShape& s);
// From the final out and lse: dq += this block's part of d q; dk, dv (the block's keys and
// values) += their gradient from these queries. Null outputs are skipped.
void attention_block_backward(float* dq, float* dk, float* dv, const float* dout,
                              const float* out, const float* lse, const float* q, const float* k,
                              const float* v, const AttentionBlockShape& s);

// dst[r * dst_stride + c] = src[r * src_stride + c] for r < rows, c < cols.
void copy_columns(float* dst, int dst_stride, const float* src, int src_stride, int rows, int cols);

// Per-row softmax cross-entropy over logits [N,V]: losses[n] = lse[n] - logits[n, target[n]].
// A target < 0 is ignored (loss 0, no gradient). Backward:
// dlogits[n,:] += dloss[n] * (softmax(logits[n,:]) - onehot(target[n])).
void crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                          int N, int V);
void crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                           const int32_t* targets, const float* dloss, int N, int V);

// Dropout with a counter-based mask: element i is kept iff philox(seed, offset + i) >= p,
// kept values scaled by 1/(1-p). Backward regenerates the same mask, so nothing is stored.
void dropout_forward(float* out, const float* inp, size_t n, float p, uint64_t seed,
                     uint64_t offset);
void dropout_backward(float* dinp, const float* dout, size_t n, float p, uint64_t seed,
                      uint64_t offset);

// out[i] = a[i] + b[i].
void residual_forward(float* out, const float* a, const float* b, size_t n);

// Sum of squares, accumulated in double (for the global gradient norm).
double sum_squares(const float* x, size_t n);

// One bias-corrected AdamW step on n elements; t is the 1-based step. The gradient is
// multiplied by grad_scale first (clipping and averaging fold into it). Decoupled weight
// decay: param -= lr * weight_decay * param (pass 0 for norms and biases).
void adamw_update(float* param, float* m, float* v, const float* grad, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int64_t t,
                  float grad_scale);

}  // namespace partrain::engine::cpu
