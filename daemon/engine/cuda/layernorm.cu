// LayerNorm (GPT-2) and RMSNorm (LLaMA), one warp per row. Statistics in fp32; backward
// computes dinp per row and the weight/bias gradients as fixed-order column sums.
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

}  // namespace

template <typename Act>
Status layernorm_forward(const Context& ctx, Act* out, float* mean, float* rstd, const Act* inp,
                         const Act* w, const Act* b, int N, int C, float eps) {
  const unsigned grid = (N + kRowsPerBlock - 1) / kRowsPerBlock;
  layernorm_forward_kernel<<<grid, 32 * kRowsPerBlock, 0, ctx.stream>>>(out, mean, rstd, inp, w,
                                                                          b, N, C, eps);
  return launch_status("layernorm_forward");
}

template <typename Act>
Status layernorm_backward(const Context& ctx, Act* dinp, float* dw, float* db, const Act* dout,
                          const Act* inp, const Act* w, const float* mean, const float* rstd,
                          int N, int C) {
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
  const unsigned grid = (N + kRowsPerBlock - 1) / kRowsPerBlock;
  rmsnorm_forward_kernel<<<grid, 32 * kRowsPerBlock, 0, ctx.stream>>>(out, rstd, inp, w, N, C,
                                                                        eps);
  return launch_status("rmsnorm_forward");
}

template <typename Act>
Status rmsnorm_backward(const Context& ctx, Act* dinp, float* dw, const Act* dout,
                        const Act* inp, const Act* w, const float* rstd, int N, int C) {
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

#define PARTRAIN_INSTANTIATE(Act)                                                              \
  template Status layernorm_forward<Act>(const Context&, Act*, float*, float*, const Act*,     \
                                         const Act*, const Act*, int, int, float);             \
  template Status layernorm_backward<Act>(const Context&, Act*, float*, float*, const Act*,    \
                                          const Act*, const Act*, const float*, const float*,  \
                                          int, int);                                           \
  template Status rmsnorm_forward<Act>(const Context&, Act*, float*, const Act*, const Act*,   \
                                       int, int, float);                                       \
  template Status rmsnorm_backward<Act>(const Context&, Act*, float*, const Act*, const Act*,  \
                                        const Act*, const float*, int, int);
PARTRAIN_INSTANTIATE(float)
PARTRAIN_INSTANTIATE(bf16)
#undef PARTRAIN_INSTANTIATE

}  // namespace partrain::engine::cuda
