// Vectorisable exp and tanh for the pointwise kernels. glibc's expf/tanhf are scalar calls
// that stop the compiler from vectorising a loop (GELU spent more time in tanhf than in
// its arithmetic); these are plain arithmetic, so `#pragma omp simd` loops vectorise.
// exp: Cody-Waite range reduction to r in [-ln2/2, ln2/2] and Cephes' degree-6 polynomial
// for e^r, then scaling by 2^n through the exponent bits: within 2 ulp of expf over the
// clamped range [-87.3, 88.7] (exp underflows to ~1e-38 below, overflows to ~1.6e38 above).
// tanh(u) = 1 - 2 / (e^{2u} + 1): absolute error below 2e-7, which is what GELU needs.
#pragma once

#include <cstdint>
#include <cstring>

namespace partrain::engine::cpu {

inline float fast_exp(float x) {
  // Written so GCC vectorises it without -ffast-math: selects instead of fmin/fmax, and
  // round-to-nearest by adding and subtracting 1.5 * 2^23 instead of floor().
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.7f ? 88.7f : x;
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;  // ln2 split in two parts
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return er * scale;
}

inline float fast_tanh(float u) { return 1.0f - 2.0f / (fast_exp(2.0f * u) + 1.0f); }

inline float fast_sigmoid(float u) { return 1.0f / (1.0f + fast_exp(-u)); }

}  // namespace partrain::engine::cpu
