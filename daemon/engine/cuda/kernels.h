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
#include "engine/positions.h"

namespace partrain::engine::cuda {

using bf16 = __nv_bfloat16;

class LtCache;          // blaslt.h
class CudnnAttention;   // attention_cudnn.cc

// The fast paths the launchers take. Each one has the previous path as its fallback (taken
// when the option is off, and where the fast path refuses a shape), so any subset computes
// the same function. Names as PARTRAIN_CUDA_PATHS lists them (parse_kernel_paths).
struct KernelOptions {
  bool lt_cache = true;      // "lt": every GEMM through cached cuBLASLt plans (blaslt.h)
  bool epilogues = true;     // "epilogue": GELU(+bias) in the fc GEMM, dGELU in the proj
                             // GEMM's input gradient, bias gradients (BGRADB) in the
                             // weight-gradient GEMM
  bool fused_norm = true;    // "norm": residual + LayerNorm in one pass; LayerNorm/RMSNorm
                             // backward with the weight gradients in the same pass
  bool vector_io = true;     // "vec": 128-bit loads and stores in the pointwise kernels
  bool multi_adamw = true;   // "adamw": AdamW over every tensor of a flat buffer in one launch
  bool cudnn_attention = true;  // "cudnn": attention through cuDNN's fused SDPA (attention_cudnn.h)
};
// "all" (every fast path), "none" (the previous paths), or a comma-separated list of the
// names above (those on, the rest off); "" is "all". An unknown name is an error naming it.
Status parse_kernel_paths(const char* spec, KernelOptions* out);
// The options as a comma-separated list of the names that are on ("none" when none).
const char* kernel_paths_name(const KernelOptions& o, char* buf, size_t n);

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
  // fp32 [kBiasScratchFloats]: a GEMM's bias gradient before it is added (BGRADB).
  float* bias_scratch = nullptr;
  KernelOptions opt;
  LtCache* lt_cache = nullptr;        // owned; cuBLASLt plans per GEMM shape
  CudnnAttention* cudnn = nullptr;    // owned; cuDNN handle and SDPA graphs (loaded on first use)
};
constexpr size_t kBiasScratchFloats = 1u << 16;
// Creates the stream, handles, a 32 MiB cuBLASLt workspace, 16 MiB of reduction scratch and
// the GEMM plan cache on `device`, with the fast paths of PARTRAIN_CUDA_PATHS (default all;
// a bad value is an error naming the variable).
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
// dst[r * dst_stride + c] += src[r * src_stride + c] for r < rows, c < cols.
template <typename T>
Status add_columns(const Context& ctx, T* dst, int dst_stride, const T* src, int src_stride, int rows,
                   int cols);

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
// res = a + b (rounded to Act), out = LayerNorm(res) (bias may be null): one pass with the
// "norm" path, else residual_forward then layernorm_forward.
template <typename Act>
Status residual_layernorm_forward(const Context& ctx, Act* res, Act* out, float* mean, float* rstd,
                                  const Act* a, const Act* b, const Act* w, const Act* bias, int N,
                                  int C, float eps);
template <typename Act>
Status residual_rmsnorm_forward(const Context& ctx, Act* res, Act* out, float* rstd, const Act* a,
                                const Act* b, const Act* w, int N, int C, float eps);
template <typename Act>
Status rmsnorm_backward(const Context& ctx, Act* dinp, float* dw, const Act* dout,
                        const Act* inp, const Act* w, const float* rstd, int N, int C);

// --- matmul.cu (cuBLASLt, cached plans and epilogues; plain cuBLAS as the fallback)
// out[N,OC] = inp[N,C] @ w[OC,C]^T (+ bias).
template <typename Act>
Status matmul_forward(const Context& ctx, Act* out, const Act* inp, const Act* w,
                      const Act* bias, int N, int C, int OC);
// The fc layer of a GELU MLP: pre[N,OC] = inp @ w^T (+ bias), out = gelu_tanh(pre); one GEMM
// with the GELU_AUX(_BIAS) epilogue where the "epilogue" path is on.
template <typename Act>
Status matmul_forward_gelu(const Context& ctx, Act* out, Act* pre, const Act* inp, const Act* w,
                           const Act* bias, int N, int C, int OC);
// dinp += dout @ w; dw += dout^T @ inp (fp32); dbias += column sums of dout (fp32).
template <typename Act>
Status matmul_backward(const Context& ctx, Act* dinp, float* dw, float* dbias, const Act* dout,
                       const Act* inp, const Act* w, int N, int C, int OC);
// matmul_backward with the write modes spelled out. Null outputs are skipped.
template <typename Act>
struct LinearGrads {
  Act* dinp = nullptr;
  bool dinp_overwrite = false;  // dinp = (not +=) dout @ w
  // Non-null: the layer's input was gelu_tanh(gelu_pre) and dinp becomes the gradient of
  // gelu_pre: dinp = gelu'(gelu_pre) * (dout @ w), always overwritten (dGELU epilogue).
  const Act* gelu_pre = nullptr;
  float* dw = nullptr;
  bool dw_overwrite = false;    // dw = (not +=) dout^T @ inp
  float* dbias = nullptr;       // always +=
};
template <typename Act>
Status matmul_backward_ex(const Context& ctx, const LinearGrads<Act>& g, const Act* dout,
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

// --- attention_cudnn.cc ("cudnn" path): cuDNN's fused flash attention (SDPA) through the
// backend API, causal, GQA, bf16 only, the same lse [B,H,T]; deterministic backward. A shape,
// dtype or machine cuDNN cannot serve (no library, head dim not a multiple of 8 or > 128, no
// engine) returns Status::unavailable with the reason: callers fall back to the paths above.
CudnnAttention* cudnn_attention_create();
void cudnn_attention_destroy(CudnnAttention* a);
// Builds (and finalizes) every tensor and operation descriptor of the SDPA graph for these
// shapes, both mask styles, without a device or handle (the operation graph itself needs
// one): the host half of the cudnn path, checkable on any machine with cuDNN's library.
Status cudnn_sdpa_describe(int B, int T, int H, int KV, int hd, int q_stride, int kv_stride,
                           bool backward, int* num_ops);
template <typename Act>
Status attention_forward_cudnn(const Context& ctx, Act* out, float* lse, const Act* q, const Act* k,
                               const Act* v, int B, int T, int H, int KV, int hd, int q_stride,
                               int kv_stride);
// dq, dk, dv are OVERWRITTEN with the gradients (cuDNN writes them), not accumulated.
template <typename Act>
Status attention_backward_cudnn(const Context& ctx, Act* dq, Act* dk, Act* dv, const Act* dout,
                                const Act* out, const float* lse, const Act* q, const Act* k,
                                const Act* v, int B, int T, int H, int KV, int hd, int q_stride,
                                int kv_stride);

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

// --- rope.cu (x [B,T,heads,hd] with row stride `stride`; out may alias inp; row t of a
// sequence at position pos.at(t), engine/positions.h)
template <typename Act>
Status rope_forward(const Context& ctx, Act* out, const Act* inp, int B, int T, int heads, int hd,
                    int stride, float theta, const SeqPositions& pos = {});
// dinp = R^T dout: WRITTEN, not accumulated (as on CPU: it runs in place on the q/k part of
// a packed gradient buffer, so dinp may alias dout).
template <typename Act>
Status rope_backward(const Context& ctx, Act* dinp, const Act* dout, int B, int T, int heads,
                     int hd, int stride, float theta, const SeqPositions& pos = {});

// --- attention_block.cu: context parallelism's attention, one block of keys at a time (the
// GPU twin of engine/cpu/attention_block.cc): queries at positions q_pos against Tk keys at
// k_pos, causal by position, merged into the running out [B*Tq, H*hd] and lse [B,H,Tq]
// (start: out 0, lse -inf) by log-sum-exp; backward from the final out and lse ADDS the
// block's part of dq and the block's dk, dv (null: skipped). One warp per row, fp32 math,
// fixed order (no atomics), any head dim up to 256.
struct AttentionBlockArgs {
  int B = 0, Tq = 0, Tk = 0, H = 0, KV = 0, hd = 0, q_stride = 0, kv_stride = 0;
  SeqPositions q_pos, k_pos;
};
template <typename Act>
Status attention_block_forward(const Context& ctx, Act* out, float* lse, const Act* q, const Act* k,
                               const Act* v, const AttentionBlockArgs& a);
// `delta` is fp32 scratch of B*H*Tq (dout . out per row).
template <typename Act>
Status attention_block_backward(const Context& ctx, Act* dq, Act* dk, Act* dv, const Act* dout,
                                const Act* out, const float* lse, const Act* q, const Act* k,
                                const Act* v, const AttentionBlockArgs& a, float* delta);

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

// The multi-tensor AdamW ("adamw" path): one launch over flat fp32 buffers whose tensors
// differ only in weight decay. Its scalars live in device memory, so a captured CUDA graph
// replays any step (write them with cudaMemcpyAsync before the launch) and the clipping
// factor can be set on the device (adamw_clip_scale) without the host reading the norm.
struct AdamWScalars {
  float lr = 0, step = 0, inv_sqrt_bc2 = 1, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float grad_scale = 1;  // the gradient's multiplier (1/clip factor, 1/accumulation)
  float norm = 0;        // written by adamw_clip_scale: the gradient norm it used
};
// The scalars of step t (1-based) as adamw_update computes them.
AdamWScalars adamw_scalars(float lr, float beta1, float beta2, float eps, int64_t t, float grad_scale);
// A run [begin, end) of the flat buffers with one weight decay; a table of them (device
// memory, sorted, covering [0, n) without gaps) describes a model's parameters.
struct AdamWSegment {
  int64_t begin = 0, end = 0;
  float weight_decay = 0;
  float pad = 0;
};
Status adamw_multi(const Context& ctx, float* param, float* m, float* v, const float* grad,
                   bf16* param_bf16, size_t n, const AdamWSegment* segments, int num_segments,
                   const AdamWScalars* scalars);
// The same with the scalars passed by value (no device copy of them).
Status adamw_multi(const Context& ctx, float* param, float* m, float* v, const float* grad,
                   bf16* param_bf16, size_t n, const AdamWSegment* segments, int num_segments,
                   const AdamWScalars& scalars);
// On the device: *t += 1, then scalars (lr, step, inv_sqrt_bc2, betas, eps) of step *t as
// adamw_scalars computes them; grad_scale and norm are left as they are.
Status adamw_advance(const Context& ctx, AdamWScalars* scalars, int64_t* t, float lr, float beta1, float beta2,
                     float eps);
// On the device: scalars->norm = sqrt(*sumsq); scalars->grad_scale = base_scale *
// min(1, max_norm / (norm + 1e-6)) (torch's clip_grad_norm_; max_norm <= 0: no clipping).
Status adamw_clip_scale(const Context& ctx, AdamWScalars* scalars, const double* sumsq,
                        float max_norm, float base_scale);

}  // namespace partrain::engine::cuda
