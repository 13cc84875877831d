// Helpers for the kernel tests: device buffers filled from host vectors (fp32 or bf16),
// deterministic random inputs, and the error measure every comparison uses.
//
// Error measure: max |gpu - cpu| / max |cpu| over a tensor (relative to the tensor's scale,
// so entries near zero do not blow it up). Inputs are rounded to the storage dtype BEFORE
// the CPU reference sees them, so the measure counts only what the GPU path itself adds.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/cuda/kernels.h"

namespace partrain::gputest {

using engine::cuda::bf16;

inline uint16_t to_bf16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float from_bf16_bits(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// x rounded to what a tensor of type A holds.
template <typename A>
std::vector<float> rounded(std::vector<float> x) {
  if constexpr (std::is_same_v<A, bf16>) {
    for (float& v : x) v = from_bf16_bits(to_bf16_bits(v));
  }
  return x;
}

// n normal(0, std) + mean numbers from a fixed seed.
inline std::vector<float> randn(size_t n, uint32_t seed, float std = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(mean, std);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

inline std::vector<int32_t> randint(size_t n, uint32_t seed, int hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(0, hi - 1);
  std::vector<int32_t> x(n);
  for (auto& v : x) v = d(rng);
  return x;
}

// A device array of T, freed on scope exit; upload/download through float vectors.
template <typename T>
class Dev {
 public:
  explicit Dev(size_t n) : n_(n) {
    if (cudaMalloc(reinterpret_cast<void**>(&p_), (n > 0 ? n : 1) * sizeof(T)) != cudaSuccess) {
      p_ = nullptr;
    }
    if (p_ != nullptr) cudaMemset(p_, 0, (n > 0 ? n : 1) * sizeof(T));
  }
  template <typename V>
  explicit Dev(const std::vector<V>& host) : Dev(host.size()) {
    upload(host);
  }
  ~Dev() {
    if (p_ != nullptr) cudaFree(p_);
  }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;

  T* get() const { return p_; }
  size_t size() const { return n_; }

  template <typename V>
  void upload(const std::vector<V>& host) {
    std::vector<T> tmp(n_);
    for (size_t i = 0; i < n_; ++i) tmp[i] = cast(host[i]);
    cudaMemcpy(p_, tmp.data(), n_ * sizeof(T), cudaMemcpyHostToDevice);
  }
  std::vector<float> download() const {
    std::vector<T> tmp(n_);
    cudaDeviceSynchronize();
    cudaMemcpy(tmp.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    std::vector<float> out(n_);
    for (size_t i = 0; i < n_; ++i) out[i] = to_float(tmp[i]);
    return out;
  }

 private:
  template <typename V>
  static T cast(V v) {
    if constexpr (std::is_same_v<T, bf16>) {
      const uint16_t b = to_bf16_bits(static_cast<float>(v));
      T t;
      std::memcpy(static_cast<void*>(&t), &b, 2);
      return t;
    } else {
      return static_cast<T>(v);
    }
  }
  static float to_float(T v) {
    if constexpr (std::is_same_v<T, bf16>) {
      uint16_t b;
      std::memcpy(&b, static_cast<const void*>(&v), 2);
      return from_bf16_bits(b);
    } else {
      return static_cast<float>(v);
    }
  }
  T* p_ = nullptr;
  size_t n_ = 0;
};

// max |got - want| / max |want| (0 when both are all zero).
inline double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(d <= diff)) diff = d;  // also catches NaN
    scale = std::fmax(scale, std::fabs(static_cast<double>(want[i])));
  }
  if (scale == 0.0) return diff;
  return diff / scale;
}

// Waits for the device and returns its error as text ("" when fine).
inline std::string device_error() {
  const cudaError_t e = cudaDeviceSynchronize();
  return e == cudaSuccess ? std::string() : std::string(cudaGetErrorString(e));
}

// The tolerance of a kernel's output, by storage type: fp32 kernels differ from the CPU
// only in summation order and libm (a few ulp, amplified by long sums); bf16 kernels round
// their output to 8 bits of mantissa (relative step 2^-8 = 0.39%), plus intermediate
// roundings in multi-stage kernels, so ~1e-2 of the tensor's scale.
template <typename A>
double tol(double f32_tol, double bf16_tol) {
  return std::is_same_v<A, float> ? f32_tol : bf16_tol;
}

}  // namespace partrain::gputest
