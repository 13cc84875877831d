// The arithmetic of PowerSGD (Vogels, Karimireddy and Jaggi, NeurIPS 2019, Algorithm 1), one
// tensor at a time. A gradient tensor of n floats plus this rank's residual, M, is viewed as a
// rows x cols matrix (row-major; the host passes ranges without shapes, so cols is the
// largest divisor of n not above sqrt(n)), and with Q (cols x r, kept from the last step):
//
//   P = M Q                 (rows x r)  then averaged over the ranks (all-reduce)
//   P <- orthonormal(P)     Gram-Schmidt on its columns, the same on every rank
//   Q = M^T P               (cols x r)  then averaged over the ranks (all-reduce)
//   approx = P Q^T          the rank-r estimate of the ranks' mean of M
//   residual = M - approx   kept for the next step; Q too (the warm start)
//
// A tensor is compressed only when r (rows + cols) < n, i.e. when P and Q are smaller than
// the tensor itself; the rest (biases, norms) are averaged whole.
//
// Worked example: n = 12, r = 1: cols = 3 (divisors of 12 up to sqrt 12 = 3.46: 1, 2, 3),
// rows = 4, and P + Q are 4 + 3 = 7 floats instead of 12.
//
// Header-only, standard library only: the powersgd plugin and its unit test include it.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace partrain::powersgd {

struct Shape {
  size_t rows = 0, cols = 0;
  bool compressed = false;  // r (rows + cols) < rows * cols
};

// The matrix view of an n-element tensor at rank r.
inline Shape shape_of(size_t n, size_t r) {
  Shape s;
  size_t c = 1;
  for (size_t d = 1; d * d <= n; ++d) {
    if (n % d == 0) c = d;
  }
  s.cols = n > 0 ? c : 0;
  s.rows = n > 0 ? n / c : 0;
  s.compressed = n > 0 && r * (s.rows + s.cols) < n;
  return s;
}

// out (rows x r) = M (rows x cols) * Q (cols x r), each sum in double.
inline void times(const float* m, const float* q, size_t rows, size_t cols, size_t r, float* out) {
  for (size_t i = 0; i < rows; ++i) {
    for (size_t k = 0; k < r; ++k) {
      double acc = 0;
      for (size_t j = 0; j < cols; ++j) acc += static_cast<double>(m[i * cols + j]) * q[j * r + k];
      out[i * r + k] = static_cast<float>(acc);
    }
  }
}

// out (cols x r) = M^T (cols x rows) * P (rows x r), each sum in double.
inline void transposed_times(const float* m, const float* p, size_t rows, size_t cols, size_t r, float* out) {
  for (size_t j = 0; j < cols; ++j) {
    for (size_t k = 0; k < r; ++k) {
      double acc = 0;
      for (size_t i = 0; i < rows; ++i) acc += static_cast<double>(m[i * cols + j]) * p[i * r + k];
      out[j * r + k] = static_cast<float>(acc);
    }
  }
}

// Modified Gram-Schmidt on the r columns of P (rows x r) in place: each column made
// orthogonal to the ones before it, then unit length; a column with (almost) nothing left
// becomes zero, so a zero gradient gives a zero estimate, never NaN.
inline void orthonormalize(float* p, size_t rows, size_t r) {
  for (size_t k = 0; k < r; ++k) {
    for (size_t l = 0; l < k; ++l) {
      double dot = 0;
      for (size_t i = 0; i < rows; ++i) dot += static_cast<double>(p[i * r + k]) * p[i * r + l];
      for (size_t i = 0; i < rows; ++i) p[i * r + k] -= static_cast<float>(dot * p[i * r + l]);
    }
    double norm = 0;
    for (size_t i = 0; i < rows; ++i) norm += static_cast<double>(p[i * r + k]) * p[i * r + k];
    norm = std::sqrt(norm);
    const double scale = norm > 1e-30 ? 1.0 / norm : 0.0;
    for (size_t i = 0; i < rows; ++i) p[i * r + k] = static_cast<float>(p[i * r + k] * scale);
  }
}

// out (rows x cols) = P (rows x r) * Q^T (r x cols).
inline void outer(const float* p, const float* q, size_t rows, size_t cols, size_t r, float* out) {
  for (size_t i = 0; i < rows; ++i) {
    for (size_t j = 0; j < cols; ++j) {
      double acc = 0;
      for (size_t k = 0; k < r; ++k) acc += static_cast<double>(p[i * r + k]) * q[j * r + k];
      out[i * cols + j] = static_cast<float>(acc);
    }
  }
}

// The warm start's first Q (cols x r): the same pseudo-random values on every rank, from
// the tensor's offset in the flat buffer (splitmix64, uniform in [-1, 1)).
inline void initial_q(uint64_t seed, size_t cols, size_t r, float* q) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < cols * r; ++i) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    q[i] = static_cast<float>(static_cast<double>(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  }
}

}  // namespace partrain::powersgd
