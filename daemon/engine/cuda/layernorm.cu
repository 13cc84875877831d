// LayerNorm (GPT-2) and RMSNorm (LLaMA), one warp per row. Statistics in fp32; backward
// computes dinp per row and the weight/bias gradients as fixed-order column sums. The "norm"
// path (KernelOptions::fused_norm) adds the residual to the forward pass and computes the
// weight gradients in the backward pass's own loop, with 128-bit accesses; the others stay
// as the fallback where C or an address does not fit 16-byte vectors.
#include <algorithm>

#include "engine/cuda/common.cuh"

namespace partrain::engine::cuda {
namespace {

constexpr int kRowsPerBlock = 8;  // warps per block, one row each

template <typename Act>
__global__ void layernorm_forward_kernel(Act* out, float* mean_out, float* rstd_out,
                                         const Act* inp, const Act* w, const Act* b, int N, int C,
                                         float eps) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const Act* x = inp + static_cast<size_t>(row) * C;
  float s = 0.0f;
  for (int c = lane; c < C; c += 32) s += to_f32(x[c]);
  const float mean = warp_sum(s) / C;
  float v = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float d = to_f32(x[c]) - mean;
    v += d * d;
  }
  const float rstd = 1.0f / sqrtf(warp_sum(v) / C + eps);
  Act* y = out + static_cast<size_t>(row) * C;
  for (int c = lane; c < C; c += 32) {
    float o = (to_f32(x[c]) - mean) * rstd * to_f32(w[c]);
    if (b != nullptr) o += to_f32(b[c]);
    y[c] = from_f32<Act>(o);
  }
  if (lane == 0) {
    if (mean_out != nullptr) mean_out[row] = mean;
    if (rstd_out != nullptr) rstd_out[row] = rstd;
  }
}

// dinp += rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout * w.
// RMSNorm is the same with mean = 0 and no mean(dnorm) term.
template <typename Act, bool kRms>
__global__ void norm_backward_input_kernel(Act* dinp, const Act* dout, const Act* inp,
                                           const Act* w, const float* mean, const float* rstd,
                                           int N, int C) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const size_t off = static_cast<size_t>(row) * C;
  const float mu = kRms ? 0.0f : mean[row], rs = rstd[row];
  float sum_d = 0.0f, sum_dx = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float dn = to_f32(dout[off + c]) * to_f32(w[c]);
    sum_d += dn;
    sum_dx += dn * (to_f32(inp[off + c]) - mu) * rs;
  }
  const float mean_d = kRms ? 0.0f : warp_sum(sum_d) / C;
  const float mean_dx = warp_sum(sum_dx) / C;
  for (int c = lane; c < C; c += 32) {
    const float dn = to_f32(dout[off + c]) * to_f32(w[c]);
    const float xhat = (to_f32(inp[off + c]) - mu) * rs;
    const float d = rs * (dn - mean_d - xhat * mean_dx);
    dinp[off + c] = from_f32<Act>(to_f32(dinp[off + c]) + d);
  }
}

// Per element: (dout * xhat, dout) for LayerNorm's dw and db; (dout * xhat) for RMSNorm.
template <typename Act, bool kRms>
struct NormParamGrads {
  const Act* dout;
  const Act* inp;
  const float* mean;
  const float* rstd;
  int C;
  __device__ void operator()(int n, int c, float* vals) const {
    const size_t i = static_cast<size_t>(n) * C + c;
    const float mu = kRms ? 0.0f : mean[n];
    const float d = to_f32(dout[i]);
    vals[0] = d * (to_f32(inp[i]) - mu) * rstd[n];
    if constexpr (!kRms) vals[1] = d;
  }
};

// ---- the fused paths ("norm"): 128-bit accesses, one warp per row, C % kVec == 0.

// Forward: x = a (+ b, written to res when kResidual, rounded to Act first, as the unfused
// residual kernel stores it), then the norm of x. The lanes re-read only what they wrote.
template <typename Act, bool kRms, bool kResidual>
__global__ void norm_forward_vec_kernel(Act* res, Act* out, float* mean_out, float* rstd_out,
                                        const Act* a, const Act* b, const Act* w, const Act* bias,
                                        int N, int C, float eps) {
  constexpr int V = kVec<Act>;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const size_t off = static_cast<size_t>(row) * C;
  const Act* x = kResidual ? res + off : a + off;
  float s = 0.0f;
  for (int c = lane * V; c < C; c += 32 * V) {
    Vec<Act> v = load16(a + off + c);
    if constexpr (kResidual) {
      const Vec<Act> u = load16(b + off + c);
#pragma unroll
      for (int j = 0; j < V; ++j) v.v[j] = from_f32<Act>(to_f32(v.v[j]) + to_f32(u.v[j]));
      store16(res + off + c, v);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) s += to_f32(v.v[j]);
  }
  const float mean = kRms ? 0.0f : warp_sum(s) / C;
  float var = 0.0f;
  for (int c = lane * V; c < C; c += 32 * V) {
    const Vec<Act> v = load16(x + c);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float d = to_f32(v.v[j]) - mean;
      var += d * d;
    }
  }
  const float rstd = 1.0f / sqrtf(warp_sum(var) / C + eps);
  for (int c = lane * V; c < C; c += 32 * V) {
    const Vec<Act> v = load16(x + c), g = load16(w + c);
    Vec<Act> o;
    if (!kRms && bias != nullptr) {
      const Vec<Act> bb = load16(bias + c);
#pragma unroll
      for (int j = 0; j < V; ++j)
        o.v[j] = from_f32<Act>((to_f32(v.v[j]) - mean) * rstd * to_f32(g.v[j]) + to_f32(bb.v[j]));
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) o.v[j] = from_f32<Act>((to_f32(v.v[j]) - mean) * rstd * to_f32(g.v[j]));
    }
    store16(out + off + c, o);
  }
  if (lane == 0) {
    if (!kRms && mean_out != nullptr) mean_out[row] = mean;
    if (rstd_out != nullptr) rstd_out[row] = rstd;
  }
}

// Backward in one pass over the rows: dinp += (as norm_backward_input_kernel) and the weight
// (and bias) gradient partials. Block r owns rows [r*rows, (r+1)*rows); its warps take them
// in turn and sum their columns into warp-private shared rows (K x C floats each), which the
// block adds in warp order into partial[(k*R + r)*C + c]: column_finish_kernel then sums the
// R partials in order. Fixed order throughout, so the same input gives the same bits.
template <typename Act, bool kRms>
__global__ void norm_backward_fused_kernel(Act* dinp, float* partial, const Act* dout,
                                           const Act* inp, const Act* w, const float* mean,
                                           const float* rstd, int N, int C, int rows) {
  constexpr int V = kVec<Act>, K = kRms ? 1 : 2;
  extern __shared__ float acc[];  // [warps][K][C]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  float* mine = acc + static_cast<size_t>(warp) * K * C;
  for (int c = lane; c < K * C; c += 32) mine[c] = 0.0f;
  __syncwarp();
  const int begin = blockIdx.x * rows, end = min(N, begin + rows);
  for (int row = begin + warp; row < end; row += warps) {
    const size_t off = static_cast<size_t>(row) * C;
    const float mu = kRms ? 0.0f : mean[row], rs = rstd[row];
    float sum_d = 0.0f, sum_dx = 0.0f;
    for (int c = lane * V; c < C; c += 32 * V) {
      const Vec<Act> d = load16(dout + off + c), x = load16(inp + off + c), g = load16(w + c);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float dn = to_f32(d.v[j]) * to_f32(g.v[j]);
        sum_d += dn;
        sum_dx += dn * (to_f32(x.v[j]) - mu) * rs;
      }
    }
    const float mean_d = kRms ? 0.0f : warp_sum(sum_d) / C;
    const float mean_dx = warp_sum(sum_dx) / C;
    for (int c = lane * V; c < C; c += 32 * V) {
      const Vec<Act> d = load16(dout + off + c), x = load16(inp + off + c), g = load16(w + c);
      Vec<Act> di = load16(dinp + off + c);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float dj = to_f32(d.v[j]), xhat = (to_f32(x.v[j]) - mu) * rs;
        const float dn = dj * to_f32(g.v[j]);
        di.v[j] = from_f32<Act>(to_f32(di.v[j]) + rs * (dn - mean_d - xhat * mean_dx));
        mine[c + j] += dj * xhat;
        if constexpr (!kRms) mine[C + c + j] += dj;
      }
      store16(dinp + off + c, di);
    }
  }
  __syncthreads();
  const int R = gridDim.x;
  for (int i = threadIdx.x; i < K * C; i += blockDim.x) {
    float total = 0.0f;
    for (int v = 0; v < warps; ++v) total += acc[static_cast<size_t>(v) * K * C + i];
    const int k = i / C, c = i % C;
    partial[(static_cast<size_t>(k) * R + blockIdx.x) * C + c] = total;
  }
}

constexpr size_t kFusedNormSmem = 48u << 10;  // the default dynamic shared-memory limit

// Warps per block for the fused backward: as many (<= 8) as fit their K x C rows in 48 KiB.
int fused_backward_warps(int K, int C) {
  const size_t per_warp = static_cast<size_t>(K) * C * sizeof(float);
  const int w = static_cast<int>(kFusedNormSmem / per_warp);
  return w > 8 ? 8 : w;
}

template <typename Act, bool kRms>
Status norm_backward_fused(const Context& ctx, Act* dinp, float* dw, float* db, const Act* dout,
                           const Act* inp, const Act* w, const float* mean, const float* rstd,
                           int N, int C, bool* done) {
  constexpr int K = kRms ? 1 : 2;
  *done = false;
  const int warps = fused_backward_warps(K, C);
  if (!ctx.opt.fused_norm || dinp == nullptr || warps < 1 || N <= 0 ||
      !vectorizable<Act>(static_cast<size_t>(C), {dinp, dout, inp, w})) {
    return Status::ok();
  }
  int R = std::max(1, std::min(2 * ctx.sm_count, (N + warps - 1) / warps));
  const size_t per_block = static_cast<size_t>(K) * C * sizeof(float);
  R = std::min<int>(R, static_cast<int>(ctx.scratch_bytes / per_block));
  if (R < 1) return Status::ok();
  const int rows = (N + R - 1) / R;
  R = (N + rows - 1) / rows;
  const size_t smem = static_cast<size_t>(warps) * per_block;
  norm_backward_fused_kernel<Act, kRms><<<R, 32 * warps, smem, ctx.stream>>>(
      dinp, ctx.scratch, dout, inp, w, mean, rstd, N, C, rows);
  PARTRAIN_RETURN_IF_ERROR(launch_status("norm_backward(fused)"));
  *done = true;
  if (dw == nullptr && db == nullptr) return Status::ok();
  ColumnOutputs<K> outs{};
  outs.out[0] = dw;
  if constexpr (K == 2) outs.out[1] = db;
  column_finish_kernel<K><<<(C + 255) / 256, 256, 0, ctx.stream>>>(outs, ctx.scratch, R, C);
  return launch_status("norm_backward(fused finish)");
}

template <typename Act, bool kRms, bool kResidual>
bool norm_forward_fused(const Context& ctx, Act* res, Act* out, float* mean, float* rstd,
                        const Act* a, const Act* b, const Act* w, const Act* bias, int N, int C,
                        float eps) {
  if (!ctx.opt.fused_norm || !vectorizable<Act>(static_cast<size_t>(C), {res, out, a, b, w, bias})) return false;
  const unsigned grid = (N + kRowsPerBlock - 1) / kRowsPerBlock;
  norm_forward_vec_kernel<Act, kRms, kResidual><<<grid, 32 * kRowsPerBlock, 0, ctx.stream>>>(
      res, out, mean, rstd, a, b, w, bias, N, C, eps);
  return true;
}

}  // namespace

template <typename Act>
Status layernorm_forward(const Context& ctx, Act* out, float* mean, float* rstd, const Act* inp,
                         const Act* w, const Act* b, int N, int C, float eps) {
  if (norm_forward_fused<Act, false, false>(ctx, nullptr, out, mean, rstd, inp, nullptr, w, b, N, C, eps)) {
    return launch_status("layernorm_forward");
  }
  const unsigned grid = (N + kRowsPerBlock - 1) / kRowsPerBlock;
  layernorm_forward_kernel<<<grid, 32 * kRowsPerBlock, 0, ctx.stream>>>(out, mean, rstd, inp, w,
                                                                          b, N, C, eps);
  return launch_status("layernorm_forward");
}

template <typename Act>
Status layernorm_backward(const Context& ctx, Act* dinp, float* dw, float* db, const Act* dout,
                          const Act* inp, const Act* w, const float* mean, const float* rstd,
                          int N, int C) {
  bool done = false;
  PARTRAIN_RETURN_IF_ERROR((norm_backward_fused<Act, false>(ctx, dinp, dw, db, dout, inp, w, mean, rstd, N, C, &done)));
  if (done) return Status::ok();
  if (dinp != nullptr) {
    const unsigned grid = (N + kRowsPerBlock - 1) / kRowsPerBlock;
    norm_backward_input_kernel<Act, false><<<grid, 32 * kRowsPerBlock, 0, ctx.stream>>>(
        dinp, dout, inp, w, mean, rstd, N, C);
    PARTRAIN_RETURN_IF_ERROR(launch_status("layernorm_backward(dinp)"));
  }
  if (dw == nullptr && db == nullptr) return Status::ok();
  return column_sums<2>(ctx, NormParamGrads<Act, false>{dout, inp, mean, rstd, C}, N, C,
                        ColumnOutputs<2>{{dw, db}});
}

namespace {
template <typename Act>
__global__ void rmsnorm_forward_kernel(Act* out, float* rstd_out, const Act* inp, const Act* w,
                                       int N, int C, float eps) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const Act* x = inp + static_cast<size_t>(row) * C;
  float ss = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float v = to_f32(x[c]);
    ss += v * v;
  }
  const float rstd = 1.0f / sqrtf(warp_sum(ss) / C + eps);
  Act* y = out + static_cast<size_t>(row) * C;
  for (int c = lane; c < C; c += 32) y[c] = from_f32<Act>(to_f32(x[c]) * rstd * to_f32(w[c]));
  if (lane == 0 && rstd_out != nullptr) rstd_out[row] = rstd;
}
}  // namespace

template <typename Act>
Status rmsnorm_forward(const Context& ctx, Act* out, float* rstd, const Act* inp, const Act* w,
                       int N, int C, float eps) {
  if (norm_forward_fused<Act, true, false>(ctx, nullptr, out, nullptr, rstd, inp, nullptr, w, nullptr, N, C, eps)) {
    return launch_status("rmsnorm_forward");
  }
  const unsigned grid = (N + kRowsPerBlock - 1) / kRowsPerBlock;
  rmsnorm_forward_kernel<<<grid, 32 * kRowsPerBlock, 0, ctx.stream>>>(out, rstd, inp, w, N, C,
                                                                        eps);
  return launch_status("rmsnorm_forward");
}

template <typename Act>
Status rmsnorm_backward(const Context& ctx, Act* dinp, float* dw, const Act* dout,
                        const Act* inp, const Act* w, const float* rstd, int N, int C) {
  bool done = false;
  PARTRAIN_RETURN_IF_ERROR((norm_backward_fused<Act, true>(ctx, dinp, dw, nullptr, dout, inp, w, nullptr, rstd, N, C, &done)));
  if (done) return Status::ok();
  if (dinp != nullptr) {
    const unsigned grid = (N + kRowsPerBlock - 1) / kRowsPerBlock;
    norm_backward_input_kernel<Act, true><<<grid, 32 * kRowsPerBlock, 0, ctx.stream>>>(
        dinp, dout, inp, w, nullptr, rstd, N, C);
    PARTRAIN_RETURN_IF_ERROR(launch_status("rmsnorm_backward(dinp)"));
  }
  if (dw == nullptr) return Status::ok();
  return column_sums<1>(ctx, NormParamGrads<Act, true>{dout, inp, nullptr, rstd, C}, N, C,
                        ColumnOutputs<1>{{dw}});
}

template <typename Act>
Status residual_layernorm_forward(const Context& ctx, Act* res, Act* out, float* mean, float* rstd,
                                  const Act* a, const Act* b, const Act* w, const Act* bias, int N,
                                  int C, float eps) {
  if (norm_forward_fused<Act, false, true>(ctx, res, out, mean, rstd, a, b, w, bias, N, C, eps)) {
    return launch_status("residual_layernorm_forward");
  }
  PARTRAIN_RETURN_IF_ERROR(residual_forward(ctx, res, a, b, static_cast<size_t>(N) * C));
  return layernorm_forward(ctx, out, mean, rstd, res, w, bias, N, C, eps);
}

template <typename Act>
Status residual_rmsnorm_forward(const Context& ctx, Act* res, Act* out, float* rstd, const Act* a,
                                const Act* b, const Act* w, int N, int C, float eps) {
  if (norm_forward_fused<Act, true, true>(ctx, res, out, nullptr, rstd, a, b, w, nullptr, N, C, eps)) {
    return launch_status("residual_rmsnorm_forward");
  }
  PARTRAIN_RETURN_IF_ERROR(residual_forward(ctx, res, a, b, static_cast<size_t>(N) * C));
  return rmsnorm_forward(ctx, out, rstd, res, w, N, C, eps);
}

#define PARTRAIN_INSTANTIATE(Act)                                                              \
  template Status layernorm_forward<Act>(const Context&, Act*, float*, float*, const Act*,     \
                                         const Act*, const Act*, int, int, float);             \
  template Status layernorm_backward<Act>(const Context&, Act*, float*, float*, const Act*,    \
                                          const Act*, const Act*, const float*, const float*,  \
                                          int, int);                                           \
  template Status rmsnorm_forward<Act>(const Context&, Act*, float*, const Act*, const Act*,   \
                                       int, int, float);                                       \
  template Status rmsnorm_backward<Act>(const Context&, Act*, float*, const Act*, const Act*,  \
                                        const Act*, const float*, int, int);                   \
  template Status residual_layernorm_forward<Act>(const Context&, Act*, Act*, float*, float*,  \
                                                  const Act*, const Act*, const Act*,          \
                                                  const Act*, int, int, float);                \
  template Status residual_rmsnorm_forward<Act>(const Context&, Act*, Act*, float*, const Act*, \
                                                const Act*, const Act*, int, int, float);
PARTRAIN_INSTANTIATE(float)
PARTRAIN_INSTANTIATE(bf16)
#undef PARTRAIN_INSTANTIATE

}  // namespace partrain::engine::cuda
