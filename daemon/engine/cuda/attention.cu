// Causal self-attention with grouped-query heads, two paths. The fused-softmax path (default): q, k, v are
// gathered head-major, cuBLAS batched GEMMs form the scores, one fused kernel applies the
// scale, the causal mask and the softmax, keeping only lse [B,H,T] for backward, and a
// second batched GEMM applies the probabilities to v. Backward recomputes the
// probabilities from lse (nothing T x T is kept between forward and backward).
//
// GQA without copies: query heads are ordered [B, KV, rep, T, hd] (head h = kv*rep + r, so
// h / rep = kv), which makes the rep query heads of one kv head one [rep*T, hd] matrix;
// one batched GEMM over B*KV groups then serves every head, and dK/dV sum over the rep
// heads inside the GEMM's reduction.
#include "engine/cuda/common.cuh"

namespace partrain::engine::cuda {
namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// The workspace, carved in a fixed order.
template <typename Act>
struct Workspace {
  Act *qp, *kp, *vp, *op, *dqp, *dkp, *dvp, *p;
  float *s, *d;
  size_t bytes;
  Workspace(void* base, int B, int T, int H, int KV, int hd) {
    const size_t qn = static_cast<size_t>(B) * H * T * hd, kn = static_cast<size_t>(B) * KV * T * hd;
    const size_t sn = static_cast<size_t>(B) * H * T * T, dn = static_cast<size_t>(B) * H * T;
    char* at = static_cast<char*>(base);
    size_t off = 0;
    auto take = [&](size_t n, size_t elem) {
      char* p0 = at == nullptr ? nullptr : at + off;
      off += align_up(n * elem);
      return p0;
    };
    qp = reinterpret_cast<Act*>(take(qn, sizeof(Act)));
    kp = reinterpret_cast<Act*>(take(kn, sizeof(Act)));
    vp = reinterpret_cast<Act*>(take(kn, sizeof(Act)));
    op = reinterpret_cast<Act*>(take(qn, sizeof(Act)));
    dqp = reinterpret_cast<Act*>(take(qn, sizeof(Act)));
    dkp = reinterpret_cast<Act*>(take(kn, sizeof(Act)));
    dvp = reinterpret_cast<Act*>(take(kn, sizeof(Act)));
    p = reinterpret_cast<Act*>(take(sn, sizeof(Act)));
    s = reinterpret_cast<float*>(take(sn, sizeof(float)));
    d = reinterpret_cast<float*>(take(dn, sizeof(float)));
    bytes = off;
  }
};

// dst [B, heads, T, hd] <- src [B, T, heads*hd...] with token stride `stride`.
template <typename Act>
__global__ void gather_heads_kernel(Act* dst, const Act* src, int B, int T, int heads, int hd,
                                    int stride) {
  const size_t total = static_cast<size_t>(B) * heads * T * hd;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int d = static_cast<int>(i % hd);
    size_t r = i / hd;
    const int t = static_cast<int>(r % T);
    r /= T;
    const int h = static_cast<int>(r % heads);
    const int b = static_cast<int>(r / heads);
    dst[i] = src[(static_cast<size_t>(b) * T + t) * stride + static_cast<size_t>(h) * hd + d];
  }
}

// dst [B, T, heads*hd...] (token stride `stride`) (+)= src [B, heads, T, hd].
template <typename Act, bool kAccumulate>
__global__ void scatter_heads_kernel(Act* dst, const Act* src, int B, int T, int heads, int hd,
                                     int stride) {
  const size_t total = static_cast<size_t>(B) * heads * T * hd;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    // Walk the destination in its own order so writes are coalesced.
    const size_t hdh = static_cast<size_t>(heads) * hd;
    const size_t bt = i / hdh;
    const int h = static_cast<int>((i % hdh) / hd), d = static_cast<int>(i % hd);
    const int b = static_cast<int>(bt / T), t = static_cast<int>(bt % T);
    const float v = to_f32(src[((static_cast<size_t>(b) * heads + h) * T + t) * hd + d]);
    Act* o = dst + bt * stride + static_cast<size_t>(h) * hd + d;
    *o = from_f32<Act>(kAccumulate ? to_f32(*o) + v : v);
  }
}

// One warp per score row r (r = (b*H + h)*T + t): p = softmax(scale * s) over keys 0..t,
// zero beyond; lse = log-sum-exp of the scaled scores.
template <typename Act>
__global__ void softmax_forward_kernel(Act* p, float* lse, const float* s, size_t rows, int T,
                                       float scale) {
  const size_t r = blockIdx.x * static_cast<size_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const int t = static_cast<int>(r % T);
  const float* sr = s + r * T;
  float m = -INFINITY, sum = 0.0f;
  for (int j = lane; j <= t; j += 32) {
    const float x = sr[j] * scale;
    if (x > m) {
      sum = sum * expf(m - x) + 1.0f;
      m = x;
    } else {
      sum += expf(x - m);
    }
  }
  const float mx = warp_max(m);
  sum = warp_sum(m == -INFINITY ? 0.0f : sum * expf(m - mx));
  const float l = mx + logf(sum);
  Act* pr = p + r * T;
  for (int j = lane; j < T; j += 32) pr[j] = from_f32<Act>(j <= t ? expf(sr[j] * scale - l) : 0.0f);
  if (lane == 0) lse[r] = l;
}

// p = exp(scale * s - lse) below the diagonal, 0 above (the forward's probabilities again).
template <typename Act>
__global__ void softmax_recompute_kernel(Act* p, const float* s, const float* lse, size_t rows,
                                         int T, float scale) {
  const size_t total = rows * T;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = i / T;
    const int j = static_cast<int>(i % T), t = static_cast<int>(r % T);
    p[i] = from_f32<Act>(j <= t ? expf(s[i] * scale - lse[r]) : 0.0f);
  }
}

// In place over p: ds = p * (dp - D[r]) * scale (the softmax backward, with the 1/sqrt(hd)
// of the scores folded in so that dq = ds k and dk = ds^T q).
template <typename Act>
__global__ void softmax_backward_kernel(Act* p_to_ds, const float* dp, const float* drow,
                                        size_t rows, int T, float scale) {
  const size_t total = rows * T;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = i / T;
    const int j = static_cast<int>(i % T), t = static_cast<int>(r % T);
    const float v = j <= t ? to_f32(p_to_ds[i]) * (dp[i] - drow[r]) * scale : 0.0f;
    p_to_ds[i] = from_f32<Act>(v);
  }
}

// D[(b*H + h)*T + t] = sum_d dout * out over one head's row: one warp each.
template <typename Act>
__global__ void attention_delta_kernel(float* drow, const Act* dout, const Act* out, int B, int T,
                                       int H, int hd) {
  const size_t w = blockIdx.x * static_cast<size_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (w >= static_cast<size_t>(B) * T * H) return;
  const int h = static_cast<int>(w % H);
  const size_t bt = w / H;
  const int b = static_cast<int>(bt / T), t = static_cast<int>(bt % T);
  const size_t off = bt * H * hd + static_cast<size_t>(h) * hd;
  float acc = 0.0f;
  for (int d = lane; d < hd; d += 32) acc += to_f32(dout[off + d]) * to_f32(out[off + d]);
  acc = warp_sum(acc);
  if (lane == 0) drow[(static_cast<size_t>(b) * H + h) * T + t] = acc;
}

// Column-major strided-batched GEMM C = op(A) op(B) (+ beta C), fp32 accumulation.
Status batched_gemm(const Context& ctx, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    int k, const void* a, cudaDataType_t at, int lda, long long sa, const void* b,
                    cudaDataType_t bt, int ldb, long long sb, void* c, cudaDataType_t ct, int ldc,
                    long long sc, int batch, const char* what) {
  const float alpha = 1.0f, beta = 0.0f;
  return cublas_status(cublasGemmStridedBatchedEx(ctx.blas, ta, tb, m, n, k, &alpha, a, at, lda, sa,
                                                  b, bt, ldb, sb, &beta, c, ct, ldc, sc, batch,
                                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                       what);
}

Status check_shape(int H, int KV, int hd) {
  if (KV <= 0 || H % KV != 0) {
    return Status::invalid("attention: heads (" + std::to_string(H) +
                           ") must be a multiple of kv_heads (" + std::to_string(KV) + ")");
  }
  if (hd <= 0) return Status::invalid("attention: head dim must be positive");
  return Status::ok();
}

}  // namespace

template <typename Act>
size_t attention_workspace_bytes(int B, int T, int H, int KV, int hd) {
  return Workspace<Act>(nullptr, B, T, H, KV, hd).bytes;
}

template <typename Act>
Status attention_forward(const Context& ctx, Act* out, float* lse, const Act* q, const Act* k,
                         const Act* v, int B, int T, int H, int KV, int hd, int q_stride,
                         int kv_stride, void* workspace) {
  PARTRAIN_RETURN_IF_ERROR(check_shape(H, KV, hd));
  Workspace<Act> ws(workspace, B, T, H, KV, hd);
  const int rep = H / KV, M = rep * T, groups = B * KV;
  const size_t qn = static_cast<size_t>(B) * H * T * hd, kn = static_cast<size_t>(B) * KV * T * hd;
  const size_t rows = static_cast<size_t>(B) * H * T;
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  constexpr cudaDataType_t at = cuda_data_type<Act>();

  gather_heads_kernel<<<grid_for(qn, 256), 256, 0, ctx.stream>>>(ws.qp, q, B, T, H, hd, q_stride);
  gather_heads_kernel<<<grid_for(kn, 256), 256, 0, ctx.stream>>>(ws.kp, k, B, T, KV, hd, kv_stride);
  gather_heads_kernel<<<grid_for(kn, 256), 256, 0, ctx.stream>>>(ws.vp, v, B, T, KV, hd, kv_stride);
  PARTRAIN_RETURN_IF_ERROR(launch_status("attention_forward(gather)"));
  // S^T [T, M] = K [hd,T]^T x Q [hd,M] per group (column-major views).
  PARTRAIN_RETURN_IF_ERROR(batched_gemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, T, M, hd, ws.kp, at, hd,
                                        static_cast<long long>(T) * hd, ws.qp, at, hd,
                                        static_cast<long long>(M) * hd, ws.s, CUDA_R_32F, T,
                                        static_cast<long long>(M) * T, groups, "attention q.k"));
  softmax_forward_kernel<<<grid_for(rows, 8), 256, 0, ctx.stream>>>(ws.p, lse, ws.s, rows, T,
                                                                     scale);
  PARTRAIN_RETURN_IF_ERROR(launch_status("attention_forward(softmax)"));
  // O^T [hd, M] = V^T [hd, T] x P^T [T, M].
  PARTRAIN_RETURN_IF_ERROR(batched_gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, hd, M, T, ws.vp, at, hd,
                                        static_cast<long long>(T) * hd, ws.p, at, T,
                                        static_cast<long long>(M) * T, ws.op, at, hd,
                                        static_cast<long long>(M) * hd, groups, "attention p.v"));
  scatter_heads_kernel<Act, false><<<grid_for(qn, 256), 256, 0, ctx.stream>>>(out, ws.op, B, T, H,
                                                                                hd, H * hd);
  return launch_status("attention_forward(scatter)");
}

template <typename Act>
Status attention_backward(const Context& ctx, Act* dq, Act* dk, Act* dv, const Act* dout,
                          const Act* out, const float* lse, const Act* q, const Act* k,
                          const Act* v, int B, int T, int H, int KV, int hd, int q_stride,
                          int kv_stride, void* workspace) {
  PARTRAIN_RETURN_IF_ERROR(check_shape(H, KV, hd));
  Workspace<Act> ws(workspace, B, T, H, KV, hd);
  const int rep = H / KV, M = rep * T, groups = B * KV;
  const size_t qn = static_cast<size_t>(B) * H * T * hd, kn = static_cast<size_t>(B) * KV * T * hd;
  const size_t rows = static_cast<size_t>(B) * H * T;
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  constexpr cudaDataType_t at = cuda_data_type<Act>();
  const long long sq = static_cast<long long>(M) * hd, sk = static_cast<long long>(T) * hd;
  const long long ss = static_cast<long long>(M) * T;

  gather_heads_kernel<<<grid_for(qn, 256), 256, 0, ctx.stream>>>(ws.qp, q, B, T, H, hd, q_stride);
  gather_heads_kernel<<<grid_for(kn, 256), 256, 0, ctx.stream>>>(ws.kp, k, B, T, KV, hd, kv_stride);
  gather_heads_kernel<<<grid_for(kn, 256), 256, 0, ctx.stream>>>(ws.vp, v, B, T, KV, hd, kv_stride);
  gather_heads_kernel<<<grid_for(qn, 256), 256, 0, ctx.stream>>>(ws.op, dout, B, T, H, hd, H * hd);
  attention_delta_kernel<<<grid_for(rows, 8), 256, 0, ctx.stream>>>(ws.d, dout, out, B, T, H, hd);
  PARTRAIN_RETURN_IF_ERROR(launch_status("attention_backward(gather)"));
  // Scores again, then the probabilities from lse.
  PARTRAIN_RETURN_IF_ERROR(batched_gemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, T, M, hd, ws.kp, at, hd, sk,
                                        ws.qp, at, hd, sq, ws.s, CUDA_R_32F, T, ss, groups,
                                        "attention q.k (recompute)"));
  softmax_recompute_kernel<<<grid_for(rows * T, 256), 256, 0, ctx.stream>>>(ws.p, ws.s, lse, rows,
                                                                             T, scale);
  PARTRAIN_RETURN_IF_ERROR(launch_status("attention_backward(recompute)"));
  // dV^T [hd, T] = dO^T [hd, M] x P [M, T].
  PARTRAIN_RETURN_IF_ERROR(batched_gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, hd, T, M, ws.op, at, hd, sq,
                                        ws.p, at, T, ss, ws.dvp, at, hd, sk, groups,
                                        "attention dv"));
  // dP^T [T, M] = V [hd, T]^T x dO^T [hd, M]  (into the score buffer).
  PARTRAIN_RETURN_IF_ERROR(batched_gemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, T, M, hd, ws.vp, at, hd, sk,
                                        ws.op, at, hd, sq, ws.s, CUDA_R_32F, T, ss, groups,
                                        "attention dp"));
  softmax_backward_kernel<<<grid_for(rows * T, 256), 256, 0, ctx.stream>>>(ws.p, ws.s, ws.d, rows,
                                                                            T, scale);
  PARTRAIN_RETURN_IF_ERROR(launch_status("attention_backward(softmax)"));
  // dQ^T [hd, M] = K^T [hd, T] x dS^T [T, M];  dK^T [hd, T] = Q^T [hd, M] x dS [M, T].
  PARTRAIN_RETURN_IF_ERROR(batched_gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, hd, M, T, ws.kp, at, hd, sk,
                                        ws.p, at, T, ss, ws.dqp, at, hd, sq, groups,
                                        "attention dq"));
  PARTRAIN_RETURN_IF_ERROR(batched_gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, hd, T, M, ws.qp, at, hd, sq,
                                        ws.p, at, T, ss, ws.dkp, at, hd, sk, groups,
                                        "attention dk"));
  if (dq != nullptr) {
    scatter_heads_kernel<Act, true><<<grid_for(qn, 256), 256, 0, ctx.stream>>>(dq, ws.dqp, B, T, H,
                                                                                hd, q_stride);
  }
  if (dk != nullptr) {
    scatter_heads_kernel<Act, true><<<grid_for(kn, 256), 256, 0, ctx.stream>>>(dk, ws.dkp, B, T,
                                                                                KV, hd, kv_stride);
  }
  if (dv != nullptr) {
    scatter_heads_kernel<Act, true><<<grid_for(kn, 256), 256, 0, ctx.stream>>>(dv, ws.dvp, B, T,
                                                                                KV, hd, kv_stride);
  }
  return launch_status("attention_backward(scatter)");
}

// ---- flash-style path: no T x T buffer at all. One thread per query row (forward, dq) or
// key row (dk, dv), fp32 registers, K/V (or Q/dO) tiles staged through shared memory, online
// softmax. Plain FMA, no tensor cores: it trades speed for memory; the GEMM path above is
// the default and this one is chosen where the scores would not fit (cuda_backend.cc).
namespace {

constexpr int kFlashRows = 64;  // query (or key) rows per block, one per thread
constexpr int kFlashTile = 32;  // rows of the staged tile

template <typename Act, int HD>
__global__ void __launch_bounds__(kFlashRows) flash_forward_kernel(
    Act* out, float* lse, const Act* q, const Act* k, const Act* v, int T, int H, int KV,
    int q_stride, int kv_stride, float scale) {
  __shared__ float ks[kFlashTile][HD], vs[kFlashTile][HD];
  const int b = blockIdx.y / H, h = blockIdx.y % H, kvh = h / (H / KV);
  const int t = blockIdx.x * kFlashRows + threadIdx.x;
  float qr[HD], acc[HD];
  const Act* qrow = q + (static_cast<size_t>(b) * T + min(t, T - 1)) * q_stride + static_cast<size_t>(h) * HD;
#pragma unroll
  for (int d = 0; d < HD; ++d) {
    qr[d] = to_f32(qrow[d]) * scale;
    acc[d] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int kv_end = min(T, (blockIdx.x + 1) * kFlashRows);  // causal: no key past the block
  for (int j0 = 0; j0 < kv_end; j0 += kFlashTile) {
    __syncthreads();
    for (int e = threadIdx.x; e < kFlashTile * HD; e += kFlashRows) {
      const int jj = e / HD, d = e % HD, j = j0 + jj;
      const size_t at = (static_cast<size_t>(b) * T + j) * kv_stride + static_cast<size_t>(kvh) * HD + d;
      ks[jj][d] = j < T ? to_f32(k[at]) : 0.0f;
      vs[jj][d] = j < T ? to_f32(v[at]) : 0.0f;
    }
    __syncthreads();
    const int jmax = t < T ? min(kFlashTile, t - j0 + 1) : 0;
    for (int jj = 0; jj < jmax; ++jj) {
      float s = 0.0f;
#pragma unroll
      for (int d = 0; d < HD; ++d) s += qr[d] * ks[jj][d];
      if (s > m) {
        const float corr = expf(m - s);
        l *= corr;
#pragma unroll
        for (int d = 0; d < HD; ++d) acc[d] *= corr;
        m = s;
      }
      const float p = expf(s - m);
      l += p;
#pragma unroll
      for (int d = 0; d < HD; ++d) acc[d] += p * vs[jj][d];
    }
  }
  if (t >= T) return;
  Act* orow = out + (static_cast<size_t>(b) * T + t) * H * HD + static_cast<size_t>(h) * HD;
#pragma unroll
  for (int d = 0; d < HD; ++d) orow[d] = from_f32<Act>(acc[d] / l);
  lse[(static_cast<size_t>(b) * H + h) * T + t] = m + logf(l);
}

// dq += scale * sum_j p (dp - D) k_j over keys j <= t, p recomputed from lse.
template <typename Act, int HD>
__global__ void __launch_bounds__(kFlashRows) flash_backward_dq_kernel(
    Act* dq, const Act* dout, const float* lse, const float* drow, const Act* q, const Act* k,
    const Act* v, int T, int H, int KV, int q_stride, int kv_stride, float scale) {
  __shared__ float ks[kFlashTile][HD], vs[kFlashTile][HD];
  const int b = blockIdx.y / H, h = blockIdx.y % H, kvh = h / (H / KV);
  const int t = blockIdx.x * kFlashRows + threadIdx.x, tc = min(t, T - 1);
  float qr[HD], dor[HD], acc[HD];
  const Act* qrow = q + (static_cast<size_t>(b) * T + tc) * q_stride + static_cast<size_t>(h) * HD;
  const Act* drow_o = dout + (static_cast<size_t>(b) * T + tc) * H * HD + static_cast<size_t>(h) * HD;
#pragma unroll
  for (int d = 0; d < HD; ++d) {
    qr[d] = to_f32(qrow[d]) * scale;
    dor[d] = to_f32(drow_o[d]);
    acc[d] = 0.0f;
  }
  const size_t r = (static_cast<size_t>(b) * H + h) * T + tc;
  const float L = lse[r], D = drow[r];
  const int kv_end = min(T, (blockIdx.x + 1) * kFlashRows);
  for (int j0 = 0; j0 < kv_end; j0 += kFlashTile) {
    __syncthreads();
    for (int e = threadIdx.x; e < kFlashTile * HD; e += kFlashRows) {
      const int jj = e / HD, d = e % HD, j = j0 + jj;
      const size_t at = (static_cast<size_t>(b) * T + j) * kv_stride + static_cast<size_t>(kvh) * HD + d;
      ks[jj][d] = j < T ? to_f32(k[at]) : 0.0f;
      vs[jj][d] = j < T ? to_f32(v[at]) : 0.0f;
    }
    __syncthreads();
    const int jmax = t < T ? min(kFlashTile, t - j0 + 1) : 0;
    for (int jj = 0; jj < jmax; ++jj) {
      float s = 0.0f, dp = 0.0f;
#pragma unroll
      for (int d = 0; d < HD; ++d) {
        s += qr[d] * ks[jj][d];
        dp += dor[d] * vs[jj][d];
      }
      const float ds = expf(s - L) * (dp - D);
#pragma unroll
      for (int d = 0; d < HD; ++d) acc[d] += ds * ks[jj][d];
    }
  }
  if (t >= T) return;
  Act* o = dq + (static_cast<size_t>(b) * T + t) * q_stride + static_cast<size_t>(h) * HD;
#pragma unroll
  for (int d = 0; d < HD; ++d) o[d] = from_f32<Act>(to_f32(o[d]) + scale * acc[d]);
}

// One thread per key row j of kv head kvh: dv += sum p dO_i, dk += scale * sum p (dp - D) q_i
// over every query head of the group and every query i >= j.
template <typename Act, int HD>
__global__ void __launch_bounds__(kFlashRows) flash_backward_dkv_kernel(
    Act* dk, Act* dv, const Act* dout, const float* lse, const float* drow, const Act* q,
    const Act* k, const Act* v, int T, int H, int KV, int q_stride, int kv_stride, float scale) {
  __shared__ float qs[kFlashTile][HD], dos[kFlashTile][HD];
  __shared__ float ls[kFlashTile], dsh[kFlashTile];
  const int b = blockIdx.y / KV, kvh = blockIdx.y % KV, rep = H / KV;
  const int j = blockIdx.x * kFlashRows + threadIdx.x, jc = min(j, T - 1);
  float kr[HD], vr[HD], dka[HD], dva[HD];
  const size_t kat = (static_cast<size_t>(b) * T + jc) * kv_stride + static_cast<size_t>(kvh) * HD;
#pragma unroll
  for (int d = 0; d < HD; ++d) {
    kr[d] = to_f32(k[kat + d]) * scale;
    vr[d] = to_f32(v[kat + d]);
    dka[d] = 0.0f;
    dva[d] = 0.0f;
  }
  const int i_begin = blockIdx.x * kFlashRows;  // causal: no query before the block's first key
  for (int h = kvh * rep; h < (kvh + 1) * rep; ++h) {
    for (int i0 = i_begin; i0 < T; i0 += kFlashTile) {
      __syncthreads();
      for (int e = threadIdx.x; e < kFlashTile * HD; e += kFlashRows) {
        const int ii = e / HD, d = e % HD, i = i0 + ii;
        const size_t bt = static_cast<size_t>(b) * T + i;
        qs[ii][d] = i < T ? to_f32(q[bt * q_stride + static_cast<size_t>(h) * HD + d]) : 0.0f;
        dos[ii][d] = i < T ? to_f32(dout[bt * H * HD + static_cast<size_t>(h) * HD + d]) : 0.0f;
      }
      for (int ii = threadIdx.x; ii < kFlashTile; ii += kFlashRows) {
        const int i = i0 + ii;
        const size_t r = (static_cast<size_t>(b) * H + h) * T + min(i, T - 1);
        ls[ii] = lse[r];
        dsh[ii] = drow[r];
      }
      __syncthreads();
      if (j >= T) continue;
      const int ii0 = max(0, j - i0), iimax = min(kFlashTile, T - i0);
      for (int ii = ii0; ii < iimax; ++ii) {
        float s = 0.0f, dp = 0.0f;
#pragma unroll
        for (int d = 0; d < HD; ++d) {
          s += kr[d] * qs[ii][d];
          dp += vr[d] * dos[ii][d];
        }
        const float p = expf(s - ls[ii]);
        const float ds = p * (dp - dsh[ii]);
#pragma unroll
        for (int d = 0; d < HD; ++d) {
          dva[d] += p * dos[ii][d];
          dka[d] += ds * qs[ii][d];
        }
      }
    }
  }
  if (j >= T) return;
#pragma unroll
  for (int d = 0; d < HD; ++d) {
    if (dk != nullptr) dk[kat + d] = from_f32<Act>(to_f32(dk[kat + d]) + scale * dka[d]);
    if (dv != nullptr) dv[kat + d] = from_f32<Act>(to_f32(dv[kat + d]) + dva[d]);
  }
}

// Calls f with the head dim as a compile-time constant.
template <typename F>
Status with_head_dim(int hd, F&& f) {
  switch (hd) {
    case 16: return f(std::integral_constant<int, 16>{});
    case 32: return f(std::integral_constant<int, 32>{});
    case 64: return f(std::integral_constant<int, 64>{});
    case 128: return f(std::integral_constant<int, 128>{});
    default:
      return Status::invalid("flash attention: head dim " + std::to_string(hd) +
                             " not supported (16, 32, 64, 128); the GEMM path takes any");
  }
}

}  // namespace

bool attention_flash_supported(int hd) { return hd == 16 || hd == 32 || hd == 64 || hd == 128; }

size_t attention_flash_workspace_bytes(int B, int T, int H) {
  return static_cast<size_t>(B) * H * T * sizeof(float);
}

template <typename Act>
Status attention_forward_flash(const Context& ctx, Act* out, float* lse, const Act* q, const Act* k,
                               const Act* v, int B, int T, int H, int KV, int hd, int q_stride,
                               int kv_stride) {
  PARTRAIN_RETURN_IF_ERROR(check_shape(H, KV, hd));
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  const dim3 grid((T + kFlashRows - 1) / kFlashRows, B * H);
  return with_head_dim(hd, [&](auto c) {
    constexpr int HD = decltype(c)::value;
    flash_forward_kernel<Act, HD><<<grid, kFlashRows, 0, ctx.stream>>>(out, lse, q, k, v, T, H, KV,
                                                                        q_stride, kv_stride, scale);
    return launch_status("attention_forward_flash");
  });
}

template <typename Act>
Status attention_backward_flash(const Context& ctx, Act* dq, Act* dk, Act* dv, const Act* dout,
                                const Act* out, const float* lse, const Act* q, const Act* k,
                                const Act* v, int B, int T, int H, int KV, int hd, int q_stride,
                                int kv_stride, float* delta) {
  PARTRAIN_RETURN_IF_ERROR(check_shape(H, KV, hd));
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  const size_t rows = static_cast<size_t>(B) * H * T;
  attention_delta_kernel<<<grid_for(rows, 8), 256, 0, ctx.stream>>>(delta, dout, out, B, T, H, hd);
  PARTRAIN_RETURN_IF_ERROR(launch_status("attention_backward_flash(delta)"));
  return with_head_dim(hd, [&](auto c) {
    constexpr int HD = decltype(c)::value;
    if (dq != nullptr) {
      const dim3 grid((T + kFlashRows - 1) / kFlashRows, B * H);
      flash_backward_dq_kernel<Act, HD><<<grid, kFlashRows, 0, ctx.stream>>>(
          dq, dout, lse, delta, q, k, v, T, H, KV, q_stride, kv_stride, scale);
      PARTRAIN_RETURN_IF_ERROR(launch_status("attention_backward_flash(dq)"));
    }
    if (dk != nullptr || dv != nullptr) {
      const dim3 grid((T + kFlashRows - 1) / kFlashRows, B * KV);
      flash_backward_dkv_kernel<Act, HD><<<grid, kFlashRows, 0, ctx.stream>>>(
          dk, dv, dout, lse, delta, q, k, v, T, H, KV, q_stride, kv_stride, scale);
      PARTRAIN_RETURN_IF_ERROR(launch_status("attention_backward_flash(dk, dv)"));
    }
    return Status::ok();
  });
}

#define PARTRAIN_INSTANTIATE(Act)                                                              \
  template size_t attention_workspace_bytes<Act>(int, int, int, int, int);                     \
  template Status attention_forward<Act>(const Context&, Act*, float*, const Act*, const Act*, \
                                         const Act*, int, int, int, int, int, int, int, void*); \
  template Status attention_backward<Act>(const Context&, Act*, Act*, Act*, const Act*,        \
                                          const Act*, const float*, const Act*, const Act*,    \
                                          const Act*, int, int, int, int, int, int, int, void*); \
  template Status attention_forward_flash<Act>(const Context&, Act*, float*, const Act*,       \
                                               const Act*, const Act*, int, int, int, int, int, \
                                               int, int);                                       \
  template Status attention_backward_flash<Act>(const Context&, Act*, Act*, Act*, const Act*,  \
                                                const Act*, const float*, const Act*,           \
                                                const Act*, const Act*, int, int, int, int, int, \
                                                int, int, float*);
PARTRAIN_INSTANTIATE(float)
PARTRAIN_INSTANTIATE(bf16)
#undef PARTRAIN_INSTANTIATE

}  // namespace partrain::engine::cuda
