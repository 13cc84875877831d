// Sign compression with error feedback, one tensor at a time (Seide et al. 2014, "1-bit SGD";
// Tang et al. 2021, "1-bit Adam"). For a gradient range g of n elements and this rank's
// residual e (the error the last compression left):
//
//   c   = g + e                        what this rank would have sent uncompressed
//   s   = mean_i |c_i|                 one scale per range (summed in double, then rounded)
//   q_i = +s if c_i >= 0, else -s      what the other ranks reconstruct
//   e'  = c - q                        the error, kept for the next step
//
// On the wire: s as one 32-bit word, then the signs, bit (i % 32) of word (i / 32) set when
// c_i < 0 (so 0 and -0 send +s); 1 + ceil(n / 32) words instead of n floats. Nothing is
// lost, only delayed: over steps 1..T the q sent add up to the g handed in minus the
// residual left, sum q_t = sum g_t - e_T (up to fp32 rounding).
//
// Worked example: g = {0.5, -1.5, 0, 2}, e = 0: s = 1, signs 0b0010 (only c_1 < 0),
// q = {1, -1, 1, 1}, e' = {-0.5, -0.5, -1, 1}.
//
// Header-only, standard library only: the onebit plugin and its unit test include it.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace partrain::onebit {

// Words of the packed signs of n elements.
inline size_t sign_words(size_t n) { return (n + 31) / 32; }

// Compresses c = g + residual (n elements): writes the signs to words[0..sign_words(n)),
// replaces residual by c - q, and returns the scale s. n == 0 gives s = 0.
inline float compress(const float* g, float* residual, size_t n, uint32_t* words) {
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    residual[i] += g[i];  // residual now holds c
    sum += std::fabs(static_cast<double>(residual[i]));
  }
  const float s = n > 0 ? static_cast<float>(sum / static_cast<double>(n)) : 0.0f;
  for (size_t w = 0; w < sign_words(n); ++w) words[w] = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool negative = residual[i] < 0.0f;
    if (negative) words[i / 32] |= uint32_t{1} << (i % 32);
    residual[i] -= negative ? -s : s;  // e' = c - q
  }
  return s;
}

// Adds the decompressed q (scale s, signs `words`) of n elements to out.
inline void add_decompressed(const uint32_t* words, float s, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] += ((words[i / 32] >> (i % 32)) & 1u) != 0 ? -s : s;
}

}  // namespace partrain::onebit
