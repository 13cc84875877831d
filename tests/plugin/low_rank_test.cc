// The powersgd plugin's arithmetic (plugins/data/powersgd/low_rank.h) against linear algebra
// facts written out here: the matrix view of a tensor, Gram-Schmidt giving orthonormal
// columns spanning the same space (P = P' R, R upper triangular), and one PowerSGD round
// recovering a matrix of rank <= r exactly (P' P'^T M = M when P' spans M's columns).
#include "../../plugins/data/powersgd/low_rank.h"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace partrain::powersgd {
namespace {

TEST(LowRank, MatrixViewOfATensor) {
  const Shape twelve = shape_of(12, 1);  // the header's worked example
  EXPECT_EQ(twelve.rows, 4u);
  EXPECT_EQ(twelve.cols, 3u);
  EXPECT_TRUE(twelve.compressed);  // 4 + 3 < 12
  const Shape w = shape_of(128 * 384, 4);
  EXPECT_EQ(w.rows * w.cols, 128u * 384u);
  EXPECT_EQ(w.cols, 192u);  // the largest divisor of 49152 up to 221
  EXPECT_TRUE(w.compressed);
  EXPECT_FALSE(shape_of(7, 1).compressed);    // prime: 7 x 1, P + Q = 8 floats
  EXPECT_FALSE(shape_of(128, 8).compressed);  // 16 x 8: 8 (16 + 8) = 192 > 128
  EXPECT_FALSE(shape_of(0, 1).compressed);
}

TEST(LowRank, GramSchmidtIsOrthonormalOverTheSameSpan) {
  constexpr size_t rows = 50, r = 4;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> p(rows * r);
  for (float& x : p) x = normal(rng);
  std::vector<float> q = p;
  orthonormalize(q.data(), rows, r);
  for (size_t a = 0; a < r; ++a) {
    for (size_t b = 0; b < r; ++b) {
      double dot = 0, back = 0;  // q_a . q_b, and (Q^T P)_ab
      for (size_t i = 0; i < rows; ++i) {
        dot += static_cast<double>(q[i * r + a]) * q[i * r + b];
        back += static_cast<double>(q[i * r + a]) * p[i * r + b];
      }
      EXPECT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-5) << a << "," << b;
      if (a > b) {
        EXPECT_NEAR(back, 0.0, 1e-4) << a << "," << b;  // R = Q^T P is upper triangular
      }
    }
  }
  std::vector<float> zero(rows * r, 0.0f);
  orthonormalize(zero.data(), rows, r);
  for (float x : zero) EXPECT_EQ(x, 0.0f);  // no NaN from a zero gradient
}

// M = U V^T of rank 2 (30 x 20), r = 2: P = M Q, orthonormalized, Q = M^T P, P Q^T == M.
TEST(LowRank, OneRoundRecoversAMatrixOfRankR) {
  constexpr size_t rows = 30, cols = 20, r = 2;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> u(rows * r), v(cols * r), m(rows * cols, 0.0f);
  for (float& x : u) x = normal(rng);
  for (float& x : v) x = normal(rng);
  for (size_t i = 0; i < rows; ++i)
    for (size_t j = 0; j < cols; ++j)
      for (size_t k = 0; k < r; ++k) m[i * cols + j] += u[i * r + k] * v[j * r + k];
  std::vector<float> q(cols * r), p(rows * r), approx(rows * cols);
  initial_q(40, cols, r, q.data());
  times(m.data(), q.data(), rows, cols, r, p.data());
  orthonormalize(p.data(), rows, r);
  transposed_times(m.data(), p.data(), rows, cols, r, q.data());
  outer(p.data(), q.data(), rows, cols, r, approx.data());
  for (size_t i = 0; i < rows * cols; ++i) EXPECT_NEAR(approx[i], m[i], 1e-4) << i;
}

// The warm start's first Q is the same for the same seed (every rank) and in [-1, 1).
TEST(LowRank, InitialQIsSeededAndBounded) {
  std::vector<float> a(64), b(64), c(64);
  initial_q(7, 16, 4, a.data());
  initial_q(7, 16, 4, b.data());
  initial_q(8, 16, 4, c.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  for (float x : a) {
    EXPECT_GE(x, -1.0f);
    EXPECT_LT(x, 1.0f);
  }
}

}  // namespace
}  // namespace partrain::powersgd
