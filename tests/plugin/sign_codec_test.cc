// The onebit plugin's compressor (plugins/data/onebit/sign_codec.h) against its equations,
// written out here independently: c = g + e, s = mean |c|, q = s * sign(c) (+s at 0),
// e' = c - q; the signs packed 32 to a word, bit i % 32 of word i / 32 set for c_i < 0.
// Exact where the arithmetic is exact (small dyadic values), bit-exact against the
// equations on random values, and the error feedback's promise over many steps: what was
// sent adds up to what was handed in, minus the residual left.
#include "../../plugins/data/onebit/sign_codec.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace partrain::onebit {
namespace {

// q of one compression, decoded by the codec itself (starting from zeros).
std::vector<float> decoded(const std::vector<uint32_t>& words, float s, size_t n) {
  std::vector<float> q(n, 0.0f);
  add_decompressed(words.data(), s, n, q.data());
  return q;
}

TEST(SignCodec, WorkedExampleIsExact) {
  const std::vector<float> g = {0.5f, -1.5f, 0.0f, 2.0f};
  std::vector<float> e(4, 0.0f);
  std::vector<uint32_t> words(sign_words(4));
  const float s = compress(g.data(), e.data(), 4, words.data());
  EXPECT_EQ(s, 1.0f);                        // (0.5 + 1.5 + 0 + 2) / 4
  EXPECT_EQ(words, (std::vector<uint32_t>{0b0010u}));
  EXPECT_EQ(decoded(words, s, 4), (std::vector<float>{1.0f, -1.0f, 1.0f, 1.0f}));
  EXPECT_EQ(e, (std::vector<float>{-0.5f, -0.5f, -1.0f, 1.0f}));
  // decompress(compress(x)) + residual == x, exactly here (all values dyadic and small).
  const std::vector<float> q = decoded(words, s, 4);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(q[i] + e[i], g[i]) << i;
}

// 70 elements: three words, the last one partly used; the residual is added before the
// signs are taken (a negative residual can flip a positive gradient).
TEST(SignCodec, PacksAcrossWordsAndFeedsTheResidualBack) {
  constexpr size_t n = 70;
  std::vector<float> g(n), e(n);
  for (size_t i = 0; i < n; ++i) {
    g[i] = (i % 3 == 0 ? -1.0f : 1.0f) * static_cast<float>(i % 8) * 0.25f;
    e[i] = i == 5 ? -4.0f : 0.0f;  // g[5] = 1.25 becomes c[5] = -2.75
  }
  std::vector<float> c(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    c[i] = g[i] + e[i];
    sum += std::fabs(c[i]);
  }
  std::vector<uint32_t> words(sign_words(n));
  ASSERT_EQ(words.size(), 3u);
  const float s = compress(g.data(), e.data(), n, words.data());
  EXPECT_EQ(s, static_cast<float>(sum / n));
  for (size_t i = 0; i < n; ++i) {
    const bool bit = (words[i / 32] >> (i % 32)) & 1u;
    EXPECT_EQ(bit, c[i] < 0) << i;
  }
  EXPECT_EQ(words[2] >> (n - 64), 0u);  // the unused bits of the last word stay clear
  EXPECT_TRUE((words[0] >> 5) & 1u);
  const std::vector<float> q = decoded(words, s, n);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(e[i], c[i] - q[i]) << i;
}

// Random gradients of mixed magnitude: every residual is c - q of the equations bit for
// bit, and q + e' recovers c within the one rounding of the subtraction.
TEST(SignCodec, MatchesTheEquationsOnRandomValues) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr size_t n = 1000;
  std::vector<float> g(n), e(n);
  for (size_t i = 0; i < n; ++i) {
    g[i] = normal(rng) * (i % 10 == 0 ? 100.0f : 0.01f);
    e[i] = normal(rng) * 0.001f;
  }
  std::vector<float> c(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    c[i] = g[i] + e[i];
    sum += std::fabs(static_cast<double>(c[i]));
  }
  const float s_ref = static_cast<float>(sum / n);
  std::vector<uint32_t> words(sign_words(n));
  const float s = compress(g.data(), e.data(), n, words.data());
  EXPECT_EQ(s, s_ref);
  const std::vector<float> q = decoded(words, s, n);
  for (size_t i = 0; i < n; ++i) {
    const float q_ref = c[i] >= 0.0f ? s_ref : -s_ref;
    ASSERT_EQ(q[i], q_ref) << i;
    ASSERT_EQ(e[i], c[i] - q_ref) << i;
    const double back = static_cast<double>(q[i]) + static_cast<double>(e[i]);
    ASSERT_LE(std::fabs(back - c[i]), std::ldexp(std::fabs(static_cast<double>(q_ref) - c[i]), -24)) << i;
  }
}

// Error feedback over 4000 steps of a fixed gradient: the sum of what was sent equals the
// sum handed in minus the residual left (up to fp32 rounding); the residual stops growing
// (here near 5 |g|: the largest elements wait until the mean scale catches up), so the
// mean of what was sent tends to g as 1/T.
TEST(SignCodec, ErrorFeedbackLosesNothingOverSteps) {
  constexpr size_t n = 64;
  constexpr int kSteps = 4000;
  std::vector<float> g(n), e(n, 0.0f);
  for (size_t i = 0; i < n; ++i) g[i] = std::sin(static_cast<float>(i)) * (1.0f + static_cast<float>(i % 4));
  std::vector<double> sent(n, 0.0);
  std::vector<uint32_t> words(sign_words(n));
  auto largest = [](const std::vector<float>& v) {
    double m = 0;
    for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
    return m;
  };
  double e_at_1000 = 0;
  for (int t = 1; t <= kSteps; ++t) {
    const float s = compress(g.data(), e.data(), n, words.data());
    const std::vector<float> q = decoded(words, s, n);
    for (size_t i = 0; i < n; ++i) sent[i] += q[i];
    if (t == 1000) e_at_1000 = largest(e);
  }
  EXPECT_LT(largest(e), 1.25 * e_at_1000);  // bounded, not growing with T
  for (size_t i = 0; i < n; ++i) {
    const double handed = static_cast<double>(g[i]) * kSteps;
    EXPECT_NEAR(sent[i], handed - e[i], 0.05) << i;
    EXPECT_NEAR(sent[i] / kSteps, g[i], 0.02) << i;  // the mean of q tends to g
  }
}

}  // namespace
}  // namespace partrain::onebit
