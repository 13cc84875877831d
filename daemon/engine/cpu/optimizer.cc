// The optimizer's kernels: AdamW, the sum of squares for the gradient norm, and the
// residual add.
#include <cmath>
#include <cstddef>

#include "engine/cpu/kernels.h"

namespace partrain::engine::cpu {

void residual_forward(float* out, const float* a, const float* b, size_t n) {
#pragma omp parallel for simd
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

double sum_squares(const float* x, size_t n) {
  // Fixed-size chunks summed in chunk order: the result does not depend on the thread count.
  constexpr size_t kChunk = 4096;
  const size_t chunks = (n + kChunk - 1) / kChunk;
  double total = 0.0;
#pragma omp parallel for ordered schedule(static)
  for (size_t c = 0; c < chunks; ++c) {
    double s = 0.0;
    const size_t end = (c + 1) * kChunk < n ? (c + 1) * kChunk : n;
    for (size_t i = c * kChunk; i < end; ++i) s += static_cast<double>(x[i]) * x[i];
#pragma omp ordered
    total += s;
  }
  return total;
}

// PyTorch's AdamW, in its order of operations:
//   p *= 1 - lr * wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
void adamw_update(float* param, float* m, float* v, const float* grad, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int64_t t,
                  float grad_scale) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(t));
  const float step = static_cast<float>(lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float decay = 1.0f - lr * weight_decay;
#pragma omp parallel for simd
  for (size_t i = 0; i < n; ++i) {
    const float g = grad[i] * grad_scale;
    m[i] = beta1 * m[i] + (1.0f - beta1) * g;
    v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
    param[i] = param[i] * decay - step * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + eps);
  }
}

}  // namespace partrain::engine::cpu
