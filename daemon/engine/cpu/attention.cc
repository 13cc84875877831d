// Causal self-attention with grouped-query heads, flash-style: forward keeps only the
// log-sum-exp of each row's scaled scores; backward recomputes the probabilities from it.
//
//   s[t,j] = q_t . k_j / sqrt(hd)  (j <= t)     p[t,j] = exp(s[t,j] - lse_t)
//   out_t  = sum_j p[t,j] v_j
//   backward, with D_t = dout_t . out_t and dp[t,j] = dout_t . v_j:
//   ds[t,j] = p[t,j] (dp[t,j] - D_t);  dq_t += ds k / sqrt(hd);  dk_j += ds q / sqrt(hd);
//   dv_j += p dout_t
// Backward runs two race-free passes (queries own dq; keys own dk, dv) so it is
// deterministic for any thread count.
#include <cmath>
#include <cstddef>
#include <vector>

#include "engine/cpu/fast_math.h"
#include "engine/cpu/kernels.h"

namespace partrain::engine::cpu {
namespace {

inline float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Below this many (batch, kv head) pairs backward uses two passes parallel over rows.
constexpr int kSinglePassMinTasks = 16;

struct Layout {
  int T, H, KV, hd, qs, kvs;
  size_t q(int b, int t, int h) const { return (static_cast<size_t>(b) * T + t) * qs + static_cast<size_t>(h) * hd; }
  size_t kv(int b, int t, int g) const { return (static_cast<size_t>(b) * T + t) * kvs + static_cast<size_t>(g) * hd; }
  size_t o(int b, int t, int h) const { return (static_cast<size_t>(b) * T + t) * H * hd + static_cast<size_t>(h) * hd; }
  size_t l(int b, int h, int t) const { return (static_cast<size_t>(b) * H + h) * T + t; }
};

}  // namespace

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       int B, int T, int H, int KV, int hd, int q_stride, int kv_stride) {
  const Layout L{T, H, KV, hd, q_stride, kv_stride};
  const int group = H / KV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
#pragma omp parallel
  {
    // Scores of one row; thread_local so the step loop does not allocate.
    thread_local std::vector<float> s;
    if (s.size() < static_cast<size_t>(T)) s.resize(static_cast<size_t>(T));
#pragma omp for collapse(3) schedule(dynamic, 8)
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < H; ++h) {
        for (int t = 0; t < T; ++t) {
          const float* qt = q + L.q(b, t, h);
          const int g = h / group;
          float mx = -INFINITY;
          for (int j = 0; j <= t; ++j) {
            s[j] = dot(qt, k + L.kv(b, j, g), hd) * scale;
            mx = s[j] > mx ? s[j] : mx;
          }
          float sum = 0.0f;
          for (int j = 0; j <= t; ++j) {
            s[j] = fast_exp(s[j] - mx);
            sum += s[j];
          }
          const float inv = 1.0f / sum;
          float* o = out + L.o(b, t, h);
          for (int i = 0; i < hd; ++i) o[i] = 0.0f;
          for (int j = 0; j <= t; ++j) {
            const float p = s[j] * inv;
            const float* vj = v + L.kv(b, j, g);
#pragma omp simd
            for (int i = 0; i < hd; ++i) o[i] += p * vj[i];
          }
          lse[L.l(b, h, t)] = mx + std::log(sum);
        }
      }
    }
  }
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                        const float* lse, const float* q, const float* k, const float* v, int B,
                        int T, int H, int KV, int hd, int q_stride, int kv_stride) {
  const Layout L{T, H, KV, hd, q_stride, kv_stride};
  const int group = H / KV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // D[b,h,t] = dout . out (= sum_j p dp), shared by both passes.
  // thread_local storage of the calling thread, so the step loop does not allocate; the
  // OpenMP threads reach it through the pointer (their own thread_local would be empty).
  thread_local std::vector<float> d_store;
  if (d_store.size() < static_cast<size_t>(B) * H * T) d_store.resize(static_cast<size_t>(B) * H * T);
  float* const D = d_store.data();
#pragma omp parallel for collapse(3)
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < T; ++t) D[L.l(b, h, t)] = dot(dout + L.o(b, t, h), out + L.o(b, t, h), hd);

  // With enough (batch, kv head) pairs to keep every thread busy, one pass per pair owns
  // the dq of its query heads and its own dk, dv: each probability is computed once. The
  // choice depends on the shapes only, never on the thread count; both sum each gradient
  // element in the same sequence, so they agree bit for bit on zeroed gradient buffers.
  if (B * KV >= kSinglePassMinTasks) {
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; ++b) {
      for (int g = 0; g < KV; ++g) {
        for (int h = g * group; h < (g + 1) * group; ++h) {
          for (int t = 0; t < T; ++t) {
            const float* qt = q + L.q(b, t, h);
            const float* dot_ = dout + L.o(b, t, h);
            const float lt = lse[L.l(b, h, t)], Dt = D[L.l(b, h, t)];
            float* dqt = dq ? dq + L.q(b, t, h) : nullptr;
            for (int j = 0; j <= t; ++j) {
              const float* kj = k + L.kv(b, j, g);
              const float* vj = v + L.kv(b, j, g);
              const float p = fast_exp(dot(qt, kj, hd) * scale - lt);
              const float ds = p * (dot(dot_, vj, hd) - Dt) * scale;
              if (dqt) {
#pragma omp simd
                for (int i = 0; i < hd; ++i) dqt[i] += ds * kj[i];
              }
              if (dk) {
                float* d = dk + L.kv(b, j, g);
#pragma omp simd
                for (int i = 0; i < hd; ++i) d[i] += ds * qt[i];
              }
              if (dv) {
                float* d = dv + L.kv(b, j, g);
#pragma omp simd
                for (int i = 0; i < hd; ++i) d[i] += p * dot_[i];
              }
            }
          }
        }
      }
    }
    return;
  }
  // Otherwise two passes, parallel over rows. Pass 1: queries own dq.
  if (dq != nullptr) {
#pragma omp parallel for collapse(3) schedule(dynamic, 8)
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < H; ++h) {
        for (int t = 0; t < T; ++t) {
          const int g = h / group;
          const float* qt = q + L.q(b, t, h);
          const float* dot_ = dout + L.o(b, t, h);
          const float lt = lse[L.l(b, h, t)], Dt = D[L.l(b, h, t)];
          float* dqt = dq + L.q(b, t, h);
          for (int j = 0; j <= t; ++j) {
            const float* kj = k + L.kv(b, j, g);
            const float p = fast_exp(dot(qt, kj, hd) * scale - lt);
            const float ds = p * (dot(dot_, v + L.kv(b, j, g), hd) - Dt) * scale;
#pragma omp simd
            for (int i = 0; i < hd; ++i) dqt[i] += ds * kj[i];
          }
        }
      }
    }
  }
  // Pass 2: keys own dk and dv, summed over the query heads of their group and t >= j.
  if (dk == nullptr && dv == nullptr) return;
#pragma omp parallel
  {
    thread_local std::vector<float> gk, gv;
    if (gk.size() < static_cast<size_t>(hd)) gk.resize(static_cast<size_t>(hd)), gv.resize(static_cast<size_t>(hd));
#pragma omp for collapse(3) schedule(dynamic, 8)
    for (int b = 0; b < B; ++b) {
      for (int g = 0; g < KV; ++g) {
        for (int j = 0; j < T; ++j) {
          const float* kj = k + L.kv(b, j, g);
          const float* vj = v + L.kv(b, j, g);
          for (int i = 0; i < hd; ++i) gk[i] = gv[i] = 0.0f;
          for (int h = g * group; h < (g + 1) * group; ++h) {
            for (int t = j; t < T; ++t) {
              const float* qt = q + L.q(b, t, h);
              const float* dot_ = dout + L.o(b, t, h);
              const float p = fast_exp(dot(qt, kj, hd) * scale - lse[L.l(b, h, t)]);
              const float ds = p * (dot(dot_, vj, hd) - D[L.l(b, h, t)]) * scale;
#pragma omp simd
              for (int i = 0; i < hd; ++i) {
                gk[i] += ds * qt[i];
                gv[i] += p * dot_[i];
              }
            }
          }
          if (dk) {
            float* d = dk + L.kv(b, j, g);
            for (int i = 0; i < hd; ++i) d[i] += gk[i];
          }
          if (dv) {
            float* d = dv + L.kv(b, j, g);
            for (int i = 0; i < hd; ++i) d[i] += gv[i];
          }
        }
      }
    }
  }
}

}  // namespace partrain::engine::cpu
