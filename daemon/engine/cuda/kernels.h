// The CUDA kernels' launchers: the GPU twin of engine/cpu/kernels.h, with the same
// conventions ([N,C] row-major activations, N = B*T; Linear weights [OC,C]; every *_backward
// ACCUMULATES into its gradients; null gradient = not needed; flash-style attention keeping
// only lse; HF rotate_half RoPE; SwiGLU packs gate|up).
//
// Precision: activations and weights are `Act` = __nv_bfloat16 (training) or float
// (exact comparisons); parameter gradients, norm statistics, lse and losses are fp32; every
// reduction and GEMM accumulates in fp32 (sum of squares in fp64).
//
// Every launcher enqueues on ctx.stream and returns the launch's Status; device faults show
// at the next synchronisation. Plain C++ header: g++ includes it with -Wall -Wpedantic.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace partrain::engine::cuda {

using bf16 = __nv_bfloat16;

// A stream with its cuBLAS handles and the cuBLASLt workspace (one per device user).
struct Context {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* lt_workspace = nullptr;
  size_t lt_workspace_bytes = 0;
  int sm_count = 0;
  // fp32 scratch for fixed-order reductions (column sums, sum of squares); kernels on this
  // context's stream use it one at a time.
  float* scratch = nullptr;
  size_t scratch_bytes = 0;
};
// Creates the stream, handles, a 32 MiB cuBLASLt workspace and 16 MiB of reduction
// scratch on `device`.
Status context_create(Context* ctx, int device);
// Releases what context_create made (safe on a partly created or empty context).
void context_destroy(Context* ctx);

// Element conversions and fills (bf16 <-> fp32, copies in either direction).
template <typename Src, typename Dst>
Status convert(const Context& ctx, Dst* out, const Src* inp, size_t n);
// out[i] += inp[i] (fp32 accumulation, result rounded to Dst).
template <typename Src, typename Dst>
Status accumulate(const Context& ctx, Dst* out, const Src* inp, size_t n);
// x[i] *= s.
template <typename T>
Status scale(const Context& ctx, T* x, float s, size_t n);
// x[i] = value.
template <typename T>
Status fill(const Context& ctx, T* x, float value, size_t n);

// Mixture-of-experts row movement (engine/cpu/rows.h); idx unique within a call, weight
// null = all ones.
// out[i,:] = weight[i] * inp[idx[i],:]   (out [M,C] overwritten)
template <typename Act>
Status gather_rows(const Context& ctx, Act* out, const Act* inp, const int32_t* idx,
                   const float* weight, int M, int C);
// out[idx[i],:] += weight[i] * inp[i,:]
template <typename Act>
Status scatter_add_rows(const Context& ctx, Act* out, const Act* inp, const int32_t* idx,
                        const float* weight, int M, int C);
// out[i] = dot(a[idx[i],:], b[i,:])     (fp32 out [M] overwritten)
template <typename Act>
Status gathered_row_dot(const Context& ctx, float* out, const Act* a, const int32_t* idx,
                        const Act* b, int M, int C);

// --- encoder.cu
template <typename Act>
Status embedding_forward(const Context& ctx, Act* out, const int32_t* tokens, const Act* wte,
                         const Act* wpe, int B, int T, int C);
// dwte rows are added with fp32 atomics (the order of equal tokens is not fixed);
// dwpe is a fixed-order sum over the batch.
template <typename Act>
Status embedding_backward(const Context& ctx, float* dwte, float* dwpe, const Act* dout,
                          const int32_t* tokens, int B, int T, int C);

// --- layernorm.cu (LayerNorm and RMSNorm)
template <typename Act>
Status layernorm_forward(const Context& ctx, Act* out, float* mean, float* rstd, const Act* inp,
                         const Act* w, const Act* b, int N, int C, float eps);
template <typename Act>
Status layernorm_backward(const Context& ctx, Act* dinp, float* dw, float* db, const Act* dout,
                          const Act* inp, const Act* w, const float* mean, const float* rstd,
                          int N, int C);
template <typename Act>
Status rmsnorm_forward(const Context& ctx, Act* out, float* rstd, const Act* inp, const Act* w,
                       int N, int C, float eps);
template <typename Act>
Status rmsnorm_backward(const Context& ctx, Act* dinp, float* dw, const Act* dout,
                        const Act* inp, const Act* w, const float* rstd, int N, int C);

// --- matmul.cu (cuBLASLt forward with the bias as epilogue; cuBLAS for backward)
// out[N,OC] = inp[N,C] @ w[OC,C]^T (+ bias).
template <typename Act>
Status matmul_forward(const Context& ctx, Act* out, const Act* inp, const Act* w,
                      const Act* bias, int N, int C, int OC);
// dinp += dout @ w; dw += dout^T @ inp (fp32); dbias += column sums of dout (fp32).
template <typename Act>
Status matmul_backward(const Context& ctx, Act* dinp, float* dw, float* dbias, const Act* dout,
                       const Act* inp, const Act* w, int N, int C, int OC);

// --- attention.cu (causal, grouped-query; cuBLAS batched GEMMs around a fused softmax
// that keeps only lse [B,H,T]; backward recomputes the probabilities from lse).
template <typename Act>
size_t attention_workspace_bytes(int B, int T, int H, int KV, int hd);
template <typename Act>
Status attention_forward(const Context& ctx, Act* out, float* lse, const Act* q, const Act* k,
                         const Act* v, int B, int T, int H, int KV, int hd, int q_stride,
                         int kv_stride, void* workspace);
template <typename Act>
Status attention_backward(const Context& ctx, Act* dq, Act* dk, Act* dv, const Act* dout,
                          const Act* out, const float* lse, const Act* q, const Act* k,
                          const Act* v, int B, int T, int H, int KV, int hd, int q_stride,
                          int kv_stride, void* workspace);

// The flash-style path: no T x T buffer (only lse and `delta`, B*H*T floats, in backward);
// one thread per row, fp32 FMA (no tensor cores), head dims 16/32/64/128.
bool attention_flash_supported(int hd);
size_t attention_flash_workspace_bytes(int B, int T, int H);
template <typename Act>
Status attention_forward_flash(const Context& ctx, Act* out, float* lse, const Act* q, const Act* k,
                               const Act* v, int B, int T, int H, int KV, int hd, int q_stride,
                               int kv_stride);
template <typename Act>
Status attention_backward_flash(const Context& ctx, Act* dq, Act* dk, Act* dv, const Act* dout,
                                const Act* out, const float* lse, const Act* q, const Act* k,
                                const Act* v, int B, int T, int H, int KV, int hd, int q_stride,
                                int kv_stride, float* delta);

// --- activation.cu (GELU tanh, SwiGLU, residual, dropout)
template <typename Act>
Status gelu_forward(const Context& ctx, Act* out, const Act* inp, size_t n);
template <typename Act>
Status gelu_backward(const Context& ctx, Act* dinp, const Act* inp, const Act* dout, size_t n);
template <typename Act>
Status swiglu_forward(const Context& ctx, Act* out, const Act* inp, int N, int F);
template <typename Act>
Status swiglu_backward(const Context& ctx, Act* dinp, const Act* inp, const Act* dout, int N,
                       int F);
template <typename Act>
Status residual_forward(const Context& ctx, Act* out, const Act* a, const Act* b, size_t n);
// Element i kept iff philox_uniform(seed, offset + i) >= p, kept values scaled by 1/(1-p).
template <typename Act>
Status dropout_forward(const Context& ctx, Act* out, const Act* inp, size_t n, float p,
                       uint64_t seed, uint64_t offset);
template <typename Act>
Status dropout_backward(const Context& ctx, Act* dinp, const Act* dout, size_t n, float p,
                        uint64_t seed, uint64_t offset);

// --- rope.cu (x [B,T,heads,hd] with row stride `stride`; out may alias inp)
template <typename Act>
Status rope_forward(const Context& ctx, Act* out, const Act* inp, int B, int T, int heads, int hd,
                    int stride, float theta);
// dinp = R^T dout: WRITTEN, not accumulated (as on CPU: it runs in place on the q/k part of
// a packed gradient buffer, so dinp may alias dout).
template <typename Act>
Status rope_backward(const Context& ctx, Act* dinp, const Act* dout, int B, int T, int heads,
                     int hd, int stride, float theta);

// --- crossentropy.cu (rows of V logits with row stride Vp >= V; columns V..Vp-1 are
// vocabulary padding: outside the softmax, gradient 0)
template <typename Act>
Status crossentropy_forward(const Context& ctx, float* losses, float* lse, const Act* logits,
                            const int32_t* targets, int N, int V, int Vp);
template <typename Act>
Status crossentropy_backward(const Context& ctx, Act* dlogits, const Act* logits, const float* lse,
                             const int32_t* targets, const float* dloss, int N, int V, int Vp);
// llm.c's fused classifier: losses[n] and, in place over the logits,
// dlogits = dloss_scale * (softmax - onehot) (overwritten, not accumulated), in one pass
// pair over each row. Ignored targets (< 0) get loss 0 and gradient 0.
template <typename Act>
Status crossentropy_fused(const Context& ctx, float* losses, Act* logits, const int32_t* targets,
                          float dloss_scale, int N, int V, int Vp);

// --- adamw.cu (sum of squares for the global norm, AdamW on fp32 master weights)
// Blocks (and fp64 scratch slots) sum_squares uses.
constexpr int kSumSquaresBlocks = 264;
// *result (device) += sum(x^2), in a fixed order (two passes through ctx.scratch), so the
// same input gives the same bits.
template <typename G>
Status sum_squares(const Context& ctx, double* result, const G* x, size_t n);
// One bias-corrected AdamW step (t 1-based) on fp32 master weights; grads are multiplied by
// grad_scale first; decoupled decay param -= lr*wd*param. Writes the bf16 compute copy when
// param_bf16 is non-null.
Status adamw_update(const Context& ctx, float* param, float* m, float* v, const float* grad,
                    bf16* param_bf16, size_t n, float lr, float beta1, float beta2, float eps,
                    float weight_decay, int64_t t, float grad_scale);

}  // namespace partrain::engine::cuda
