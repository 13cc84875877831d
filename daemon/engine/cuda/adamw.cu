// The optimizer's kernels: the sum of squares behind the global gradient norm (fp64, fixed
// order, so a rerun gives the same bits) and AdamW on fp32 master weights, which also
// writes the bf16 copy the forward pass reads.
#include <cmath>

#include "engine/cuda/common.cuh"

namespace partrain::engine::cuda {
namespace {

template <typename G>
__global__ void sum_squares_partial_kernel(double* partial, const G* x, size_t n) {
  double acc = 0.0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const double v = to_f32(x[i]);
    acc += v * v;
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void sum_squares_finish_kernel(double* result, const double* partial, int count) {
  double acc = 0.0;
  for (int i = 0; i < count; ++i) acc += partial[i];
  *result += acc;
}

// PyTorch's AdamW in its order of operations (engine/cpu/optimizer.cc):
//   p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
__global__ void adamw_kernel(float* param, float* m, float* v, const float* grad, bf16* param_bf16,
                             size_t n, float step, float inv_sqrt_bc2, float decay, float beta1,
                             float beta2, float eps, float grad_scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float g = grad[i] * grad_scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    const float p = param[i] * decay - step * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
    m[i] = mi;
    v[i] = vi;
    param[i] = p;
    if (param_bf16 != nullptr) param_bf16[i] = __float2bfloat16_rn(p);
  }
}

// The multi-tensor AdamW: blocks take chunks of the flat buffers; each finds the segment
// (weight-decay run) of its chunk's first element and walks forward. The arithmetic is
// adamw_kernel's, element for element; the scalars come from device memory.
__global__ void adamw_multi_kernel(float* param, float* m, float* v, const float* grad,
                                   bf16* param_bf16, size_t n, size_t chunk,
                                   const AdamWSegment* segs, int nsegs, const AdamWScalars* sc_dev,
                                   AdamWScalars sc_val) {
  const AdamWScalars* sc = sc_dev != nullptr ? sc_dev : &sc_val;
  __shared__ int first;
  const size_t begin = blockIdx.x * chunk, end = min(n, begin + chunk);
  if (threadIdx.x == 0) {
    int lo = 0, hi = nsegs - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (static_cast<size_t>(segs[mid].begin) <= begin) lo = mid; else hi = mid - 1;
    }
    first = lo;
  }
  __syncthreads();
  const float lr = sc->lr, step = sc->step, inv_sqrt_bc2 = sc->inv_sqrt_bc2, beta1 = sc->beta1,
              beta2 = sc->beta2, eps = sc->eps, grad_scale = sc->grad_scale;
  int s = first;
  float decay = 1.0f - __fmul_rn(lr, segs[s].weight_decay);
  for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    bool moved = false;
    while (s + 1 < nsegs && static_cast<size_t>(segs[s].end) <= i) ++s, moved = true;
    if (moved) decay = 1.0f - __fmul_rn(lr, segs[s].weight_decay);
    if (i < static_cast<size_t>(segs[s].begin) || i >= static_cast<size_t>(segs[s].end)) continue;
    const float g = grad[i] * grad_scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    const float p = param[i] * decay - step * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
    m[i] = mi;
    v[i] = vi;
    param[i] = p;
    if (param_bf16 != nullptr) param_bf16[i] = __float2bfloat16_rn(p);
  }
}

__global__ void adamw_clip_kernel(AdamWScalars* sc, const double* sumsq, float max_norm, float base) {
  const float norm = static_cast<float>(sqrt(*sumsq));
  float scale = 1.0f;
  if (max_norm > 0.0f) {
    const float coef = max_norm / (norm + 1e-6f);
    scale = coef < 1.0f ? coef : 1.0f;
  }
  sc->grad_scale = base * scale;
  sc->norm = norm;
}

// Step t+1's scalars from step t's, on the device (lr fixed): a captured graph replays steps.
__global__ void adamw_advance_kernel(AdamWScalars* sc, int64_t* t, float lr, float beta1, float beta2, float eps) {
  const int64_t next = *t + 1;
  *t = next;
  const double bc1 = 1.0 - pow(static_cast<double>(beta1), static_cast<double>(next));
  const double bc2 = 1.0 - pow(static_cast<double>(beta2), static_cast<double>(next));
  sc->lr = lr;
  sc->step = static_cast<float>(lr / bc1);
  sc->inv_sqrt_bc2 = static_cast<float>(1.0 / sqrt(bc2));
  sc->beta1 = beta1;
  sc->beta2 = beta2;
  sc->eps = eps;
}

}  // namespace

Status adamw_advance(const Context& ctx, AdamWScalars* scalars, int64_t* t, float lr, float beta1, float beta2,
                     float eps) {
  adamw_advance_kernel<<<1, 1, 0, ctx.stream>>>(scalars, t, lr, beta1, beta2, eps);
  return launch_status("adamw_advance");
}

AdamWScalars adamw_scalars(float lr, float beta1, float beta2, float eps, int64_t t, float grad_scale) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(t));
  AdamWScalars s;
  s.lr = lr;
  s.step = static_cast<float>(lr / bc1);
  s.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.eps = eps;
  s.grad_scale = grad_scale;
  return s;
}

Status adamw_multi(const Context& ctx, float* param, float* m, float* v, const float* grad,
                   bf16* param_bf16, size_t n, const AdamWSegment* segments, int num_segments,
                   const AdamWScalars* scalars) {
  if (n == 0) return Status::ok();
  if (num_segments < 1) return Status::internal("adamw_multi: no segments");
  constexpr size_t kChunk = 8192;
  const size_t blocks = (n + kChunk - 1) / kChunk;
  adamw_multi_kernel<<<static_cast<unsigned>(blocks), 512, 0, ctx.stream>>>(
      param, m, v, grad, param_bf16, n, kChunk, segments, num_segments, scalars, AdamWScalars{});
  return launch_status("adamw_multi");
}

Status adamw_multi(const Context& ctx, float* param, float* m, float* v, const float* grad,
                   bf16* param_bf16, size_t n, const AdamWSegment* segments, int num_segments,
                   const AdamWScalars& scalars) {
  if (n == 0) return Status::ok();
  if (num_segments < 1) return Status::internal("adamw_multi: no segments");
  constexpr size_t kChunk = 8192;
  const size_t blocks = (n + kChunk - 1) / kChunk;
  adamw_multi_kernel<<<static_cast<unsigned>(blocks), 512, 0, ctx.stream>>>(
      param, m, v, grad, param_bf16, n, kChunk, segments, num_segments, nullptr, scalars);
  return launch_status("adamw_multi");
}

Status adamw_clip_scale(const Context& ctx, AdamWScalars* scalars, const double* sumsq,
                        float max_norm, float base_scale) {
  adamw_clip_kernel<<<1, 1, 0, ctx.stream>>>(scalars, sumsq, max_norm, base_scale);
  return launch_status("adamw_clip_scale");
}

template <typename G>
Status sum_squares(const Context& ctx, double* result, const G* x, size_t n) {
  if (ctx.scratch_bytes < kSumSquaresBlocks * sizeof(double)) {
    return Status::internal("sum_squares: reduction scratch too small");
  }
  double* partial = reinterpret_cast<double*>(ctx.scratch);
  sum_squares_partial_kernel<<<kSumSquaresBlocks, 256, 0, ctx.stream>>>(partial, x, n);
  PARTRAIN_RETURN_IF_ERROR(launch_status("sum_squares"));
  sum_squares_finish_kernel<<<1, 1, 0, ctx.stream>>>(result, partial, kSumSquaresBlocks);
  return launch_status("sum_squares(finish)");
}

Status adamw_update(const Context& ctx, float* param, float* m, float* v, const float* grad,
                    bf16* param_bf16, size_t n, float lr, float beta1, float beta2, float eps,
                    float weight_decay, int64_t t, float grad_scale) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(t));
  const float step = static_cast<float>(lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float decay = 1.0f - lr * weight_decay;
  adamw_kernel<<<grid_for(n, 256), 256, 0, ctx.stream>>>(param, m, v, grad, param_bf16, n, step,
                                                          inv_sqrt_bc2, decay, beta1, beta2, eps,
                                                          grad_scale);
  return launch_status("adamw_update");
}

template Status sum_squares<float>(const Context&, double*, const float*, size_t);
template Status sum_squares<bf16>(const Context&, double*, const bf16*, size_t);

}  // namespace partrain::engine::cuda
