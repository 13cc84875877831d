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

}  // namespace

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
