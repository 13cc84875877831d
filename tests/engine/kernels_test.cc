// Every CPU kernel's backward against central finite differences of its forward, on tiny
// shapes. The objective is L = sum(out * R) for a fixed random R, so dL/dout = R; the
// forward runs in fp32 and L is summed in double. Kernels with no derivative (AdamW,
// dropout's mask, row moves) are checked against hand-written formulas instead.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/cpu/fast_math.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/rows.h"
#include "engine/philox.h"

namespace partrain::engine::cpu {
namespace {

using Vec = std::vector<float>;

Vec random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  Vec v(n);
  for (float& x : v) x = d(gen);
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Central differences of objective() with respect to every element of *x, compared with
// `analytic`: |a - fd| <= atol + rtol * |fd|.
void expect_fd(const std::string& what, Vec* x, const Vec& analytic,
               const std::function<double()>& objective, double eps = 1e-2, double rtol = 1e-2,
               double atol = 2e-3) {
  ASSERT_EQ(x->size(), analytic.size()) << what;
  for (size_t i = 0; i < x->size(); ++i) {
    const float orig = (*x)[i];
    (*x)[i] = orig + static_cast<float>(eps);
    const double up = objective();
    (*x)[i] = orig - static_cast<float>(eps);
    const double down = objective();
    (*x)[i] = orig;
    const double fd = (up - down) / (2 * eps);
    ASSERT_NEAR(analytic[i], fd, atol + rtol * std::fabs(fd)) << what << "[" << i << "]";
  }
}

TEST(KernelsFd, Matmul) {
  const int N = 5, C = 4, OC = 3;
  Vec inp = random_vec(N * C, 1), w = random_vec(OC * C, 2), b = random_vec(OC, 3);
  const Vec R = random_vec(N * OC, 4);
  auto obj = [&] {
    Vec out(N * OC);
    matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    return dot(out, R);
  };
  Vec dinp(N * C, 0.5f), dw(OC * C, 0.0f), db(OC, 0.0f);
  matmul_backward(dinp.data(), dw.data(), db.data(), R.data(), inp.data(), w.data(), N, C, OC);
  for (float& x : dinp) x -= 0.5f;  // backward accumulates onto what was there
  expect_fd("dinp", &inp, dinp, obj);
  expect_fd("dw", &w, dw, obj);
  expect_fd("dbias", &b, db, obj);
}

TEST(KernelsFd, LayerNorm) {
  const int N = 4, C = 6;
  Vec inp = random_vec(N * C, 5), w = random_vec(C, 6), b = random_vec(C, 7);
  const Vec R = random_vec(N * C, 8);
  Vec mean(N), rstd(N);
  auto obj = [&] {
    Vec out(N * C);
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C,
                      1e-5f);
    return dot(out, R);
  };
  obj();
  Vec dinp(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
  layernorm_backward(dinp.data(), dw.data(), db.data(), R.data(), inp.data(), w.data(),
                     mean.data(), rstd.data(), N, C);
  expect_fd("dinp", &inp, dinp, obj, 1e-3);
  expect_fd("dw", &w, dw, obj);
  expect_fd("db", &b, db, obj);
}

TEST(KernelsFd, RmsNorm) {
  const int N = 4, C = 6;
  Vec inp = random_vec(N * C, 9), w = random_vec(C, 10);
  const Vec R = random_vec(N * C, 11);
  Vec rstd(N);
  auto obj = [&] {
    Vec out(N * C);
    rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C, 1e-5f);
    return dot(out, R);
  };
  obj();
  Vec dinp(N * C, 0.0f), dw(C, 0.0f);
  rmsnorm_backward(dinp.data(), dw.data(), R.data(), inp.data(), w.data(), rstd.data(), N, C);
  expect_fd("dinp", &inp, dinp, obj, 1e-3);
  expect_fd("dw", &w, dw, obj);
}

// Attention with GQA (H = 4 query heads sharing KV = 2 key/value heads) read from one
// packed [B, T, (H + 2 KV) hd] buffer, as the model calls it.
TEST(KernelsFd, CausalAttentionGqaPacked) {
  const int B = 2, T = 5, H = 4, KV = 2, hd = 4;
  const int W = (H + 2 * KV) * hd;
  Vec qkv = random_vec(static_cast<size_t>(B) * T * W, 12);
  const Vec R = random_vec(static_cast<size_t>(B) * T * H * hd, 13);
  Vec out(R.size()), lse(static_cast<size_t>(B) * H * T);
  auto obj = [&] {
    attention_forward(out.data(), lse.data(), qkv.data(), qkv.data() + H * hd,
                      qkv.data() + (H + KV) * hd, B, T, H, KV, hd, W, W);
    return dot(out, R);
  };
  obj();
  Vec dqkv(qkv.size(), 0.0f);
  attention_backward(dqkv.data(), dqkv.data() + H * hd, dqkv.data() + (H + KV) * hd, R.data(),
                     out.data(), lse.data(), qkv.data(), qkv.data() + H * hd,
                     qkv.data() + (H + KV) * hd, B, T, H, KV, hd, W, W);
  expect_fd("dqkv", &qkv, dqkv, obj, 1e-3);
}

// Enough (batch, kv head) pairs for the single-pass backward: checked against finite
// differences, and bit for bit against the two-pass backward run one sequence at a time.
TEST(KernelsFd, CausalAttentionSinglePassBackward) {
  const int B = 8, T = 3, H = 4, KV = 2, hd = 2;
  const int W = (H + 2 * KV) * hd;
  Vec qkv = random_vec(static_cast<size_t>(B) * T * W, 40);
  const Vec R = random_vec(static_cast<size_t>(B) * T * H * hd, 41);
  Vec out(R.size()), lse(static_cast<size_t>(B) * H * T);
  auto obj = [&] {
    attention_forward(out.data(), lse.data(), qkv.data(), qkv.data() + H * hd,
                      qkv.data() + (H + KV) * hd, B, T, H, KV, hd, W, W);
    return dot(out, R);
  };
  obj();
  Vec dqkv(qkv.size(), 0.0f);
  attention_backward(dqkv.data(), dqkv.data() + H * hd, dqkv.data() + (H + KV) * hd, R.data(),
                     out.data(), lse.data(), qkv.data(), qkv.data() + H * hd,
                     qkv.data() + (H + KV) * hd, B, T, H, KV, hd, W, W);
  Vec per_seq(qkv.size(), 0.0f);
  for (int b = 0; b < B; ++b) {
    const size_t io = static_cast<size_t>(b) * T * W, oo = static_cast<size_t>(b) * T * H * hd;
    float* d = per_seq.data() + io;
    const float* x = qkv.data() + io;
    attention_backward(d, d + H * hd, d + (H + KV) * hd, R.data() + oo, out.data() + oo,
                       lse.data() + static_cast<size_t>(b) * H * T, x, x + H * hd,
                       x + (H + KV) * hd, 1, T, H, KV, hd, W, W);
  }
  EXPECT_TRUE(per_seq == dqkv);
  expect_fd("dqkv", &qkv, dqkv, obj, 1e-3);
}

TEST(KernelsFd, AttentionFirstTokenAttendsOnlyToItself) {
  const int B = 1, T = 3, H = 1, hd = 2;
  Vec q = random_vec(T * hd, 14), k = random_vec(T * hd, 15), v = random_vec(T * hd, 16);
  Vec out(T * hd), lse(T);
  attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), B, T, H, H, hd, hd, hd);
  EXPECT_FLOAT_EQ(out[0], v[0]);
  EXPECT_FLOAT_EQ(out[1], v[1]);
  EXPECT_NEAR(lse[0], (q[0] * k[0] + q[1] * k[1]) / std::sqrt(2.0f), 1e-6);
}

TEST(KernelsFd, Gelu) {
  const size_t n = 16;
  Vec x = random_vec(n, 17, 2.0f);
  const Vec R = random_vec(n, 18);
  auto obj = [&] {
    Vec out(n);
    gelu_forward(out.data(), x.data(), n);
    return dot(out, R);
  };
  Vec dx(n, 0.0f);
  gelu_backward(dx.data(), x.data(), R.data(), n);
  expect_fd("dx", &x, dx, obj, 1e-3);
  // Value check against the formula at one point: gelu(1) = 0.841192 (tanh approximation).
  Vec one{1.0f}, g(1);
  gelu_forward(g.data(), one.data(), 1);
  EXPECT_NEAR(g[0], 0.8411920, 1e-6);
}

TEST(KernelsFd, SwiGlu) {
  const int N = 3, F = 4;
  Vec x = random_vec(N * 2 * F, 19, 2.0f);
  const Vec R = random_vec(N * F, 20);
  auto obj = [&] {
    Vec out(N * F);
    swiglu_forward(out.data(), x.data(), N, F);
    return dot(out, R);
  };
  Vec dx(x.size(), 0.0f);
  swiglu_backward(dx.data(), x.data(), R.data(), N, F);
  expect_fd("dx", &x, dx, obj, 1e-3);
}

TEST(KernelsFd, RopeIsARotationAndBackwardIsItsTranspose) {
  const int B = 2, T = 4, heads = 2, hd = 6, stride = heads * hd + 3;  // padded rows
  Vec x = random_vec(static_cast<size_t>(B) * T * stride, 21);
  const Vec R = random_vec(x.size(), 22);
  auto obj = [&] {
    Vec out = x;
    rope_forward(out.data(), x.data(), B, T, heads, hd, stride, 10000.0f);
    double s = 0;  // only the rotated elements count
    for (int n = 0; n < B * T; ++n)
      for (int i = 0; i < heads * hd; ++i) s += static_cast<double>(out[n * stride + i]) * R[n * stride + i];
    return s;
  };
  Vec dx = R;
  rope_backward(dx.data(), R.data(), B, T, heads, hd, stride, 10000.0f);
  for (int n = 0; n < B * T; ++n)
    for (int i = heads * hd; i < stride; ++i) dx[n * stride + i] = 0.0f;  // padding: no grad
  expect_fd("dx", &x, dx, obj, 1e-2);
  // Position 0 is the identity; position 1, pair 0 is rotated by exactly 1 radian.
  Vec y(x.size());
  rope_forward(y.data(), x.data(), B, T, heads, hd, stride, 10000.0f);
  EXPECT_EQ(y[0], x[0]);
  const float* x1 = &x[stride];
  const float* y1 = &y[stride];
  EXPECT_NEAR(y1[0], x1[0] * std::cos(1.0) - x1[3] * std::sin(1.0), 1e-6);
  EXPECT_NEAR(y1[3], x1[3] * std::cos(1.0) + x1[0] * std::sin(1.0), 1e-6);
}

TEST(KernelsFd, CrossEntropy) {
  const int N = 4, V = 7;
  Vec z = random_vec(N * V, 23, 2.0f);
  const std::vector<int32_t> tgt{3, 0, -1, 6};
  const Vec dl = random_vec(N, 24);
  Vec losses(N), lse(N);
  auto obj = [&] {
    crossentropy_forward(losses.data(), lse.data(), z.data(), tgt.data(), N, V);
    return dot(losses, dl);
  };
  obj();
  EXPECT_EQ(losses[2], 0.0f);  // ignored target
  // Row 0 by hand.
  double s = 0;
  for (int i = 0; i < V; ++i) s += std::exp(static_cast<double>(z[i]));
  EXPECT_NEAR(losses[0], std::log(s) - z[3], 1e-5);
  Vec dz(z.size(), 0.0f);
  crossentropy_backward(dz.data(), z.data(), lse.data(), tgt.data(), dl.data(), N, V);
  expect_fd("dlogits", &z, dz, obj, 1e-3);
}

TEST(KernelsFd, Embedding) {
  const int B = 2, T = 3, C = 4, V = 5;
  Vec wte = random_vec(V * C, 25), wpe = random_vec(T * C, 26);
  const std::vector<int32_t> tok{1, 4, 1, 0, 1, 3};
  const Vec R = random_vec(B * T * C, 27);
  auto obj = [&] {
    Vec out(B * T * C);
    embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    return dot(out, R);
  };
  Vec dwte(wte.size(), 0.0f), dwpe(wpe.size(), 0.0f);
  embedding_backward(dwte.data(), dwpe.data(), R.data(), tok.data(), B, T, C);
  expect_fd("dwte", &wte, dwte, obj);
  expect_fd("dwpe", &wpe, dwpe, obj);
}

TEST(KernelsFd, DropoutMaskIsCounterBasedAndScaled) {
  const size_t n = 100000;
  const float p = 0.25f;
  const uint64_t seed = philox_key(5, 6, 7);
  Vec x(n, 1.0f), y(n), dx(n, 0.0f);
  dropout_forward(y.data(), x.data(), n, p, seed, 1000);
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool keep = philox_uniform(seed, 1000 + i) >= p;
    ASSERT_EQ(y[i], keep ? 1.0f / (1.0f - p) : 0.0f) << i;
    kept += keep;
  }
  EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - p, 0.01);
  // A window of the same stream starting elsewhere gives the same mask (split-invariant).
  Vec y2(n / 2);
  dropout_forward(y2.data(), x.data(), n / 2, p, seed, 1000 + n / 2);
  for (size_t i = 0; i < n / 2; ++i) ASSERT_EQ(y2[i], y[n / 2 + i]);
  // Backward = the same mask and scale applied to dout (it is linear), accumulated.
  const Vec d = random_vec(n, 28);
  dropout_backward(dx.data(), d.data(), n, p, seed, 1000);
  for (size_t i = 0; i < n; i += 97) ASSERT_EQ(dx[i], y[i] * d[i]);
}

TEST(Kernels, FastExpAndTanhAreAccurate) {
  double worst_exp = 0, worst_tanh = 0;
  for (int i = -800000; i <= 800000; ++i) {
    const float x = static_cast<float>(i) * 1e-4f;  // [-80, 80]
    const double e = std::exp(static_cast<double>(x));
    worst_exp = std::fmax(worst_exp, std::fabs(fast_exp(x) - e) / e);
    if (std::fabs(x) < 20) worst_tanh = std::fmax(worst_tanh, std::fabs(fast_tanh(x) - std::tanh(static_cast<double>(x))));
  }
  EXPECT_LT(worst_exp, 3e-7);   // ~2.5 ulp
  EXPECT_LT(worst_tanh, 3e-7);
  EXPECT_EQ(fast_tanh(30.0f), 1.0f);
  EXPECT_EQ(fast_tanh(-30.0f), -1.0f);
}

TEST(Kernels, AdamWMatchesTheFormula) {
  const size_t n = 7;
  Vec p = random_vec(n, 29), g = random_vec(n, 30), m(n, 0.0f), v(n, 0.0f);
  std::vector<double> pd(p.begin(), p.end()), md(n, 0.0), vd(n, 0.0);
  const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, scale = 0.5;
  for (int t = 1; t <= 3; ++t) {
    adamw_update(p.data(), m.data(), v.data(), g.data(), n, static_cast<float>(lr), 0.9f, 0.95f,
                 1e-8f, 0.1f, t, 0.5f);
    for (size_t i = 0; i < n; ++i) {
      const double gi = g[i] * scale;
      md[i] = b1 * md[i] + (1 - b1) * gi;
      vd[i] = b2 * vd[i] + (1 - b2) * gi * gi;
      const double mh = md[i] / (1 - std::pow(b1, t)), vh = vd[i] / (1 - std::pow(b2, t));
      pd[i] = pd[i] - lr * wd * pd[i] - lr * mh / (std::sqrt(vh) + eps);
    }
  }
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(p[i], pd[i], 1e-6 * (1 + std::fabs(pd[i]))) << i;
}

TEST(Kernels, SumSquaresAndResidual) {
  const size_t n = 10007;
  const Vec x = random_vec(n, 31), y = random_vec(n, 32);
  EXPECT_NEAR(sum_squares(x.data(), n), dot(x, x), 1e-9 * dot(x, x));
  Vec out(n);
  residual_forward(out.data(), x.data(), y.data(), n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], x[i] + y[i]);
}

TEST(Kernels, RowGatherScatterDot) {
  const int N = 6, M = 3, C = 4;
  const Vec a = random_vec(N * C, 33), b = random_vec(M * C, 34), w = random_vec(M, 35);
  const std::vector<int32_t> idx{4, 0, 2};
  Vec g(M * C);
  gather_rows(g.data(), a.data(), idx.data(), w.data(), M, C);
  Vec s(N * C, 1.0f);
  scatter_add_rows(s.data(), b.data(), idx.data(), w.data(), M, C);
  Vec d(M);
  gathered_row_dot(d.data(), a.data(), idx.data(), b.data(), M, C);
  for (int i = 0; i < M; ++i) {
    double ref = 0;
    for (int c = 0; c < C; ++c) {
      EXPECT_FLOAT_EQ(g[i * C + c], w[i] * a[idx[i] * C + c]);
      EXPECT_FLOAT_EQ(s[idx[i] * C + c], 1.0f + w[i] * b[i * C + c]);
      ref += static_cast<double>(a[idx[i] * C + c]) * b[i * C + c];
    }
    EXPECT_NEAR(d[i], ref, 1e-6);
  }
  for (int c = 0; c < C; ++c) EXPECT_EQ(s[1 * C + c], 1.0f);  // untouched row
}

}  // namespace
}  // namespace partrain::engine::cpu
