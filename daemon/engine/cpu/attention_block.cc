// Causal attention one block of keys at a time (Megatron-core's ring attention,
// TransformerEngine's online-softmax correction); one rank's attention (attention.cc) is
// the case of one block holding the whole sequence. A cp rank's queries are two
// chunks of every sequence (engine/positions.h); the keys and values come one cp rank's
// block at a time. Key j is visible to query t when k_pos(j) <= q_pos(t); positions rise
// with the row, so the visible keys of a block are its first n_t rows.
//
// Forward, for each query row: the block's scores s_j = q . k_j / sqrt(hd) (j < n_t), its
// max m and sum z = sum_j exp(s_j - m), lse_b = m + log z, out_b = sum_j exp(s_j - m) v_j / z,
// merged into the running (out, lse):
//   lse' = M + log(e^(lse - M) + e^(lse_b - M)), M = max(lse, lse_b)
//   out' = out e^(lse - lse') + out_b e^(lse_b - lse')
// Worked example (one query, hd 1, values 1 and 3, scores 0 and log 3 in two blocks):
// block 1 gives lse 0, out 1; block 2 gives lse log 3, out 3; merged lse = log 4, out =
// 1 * 1/4 + 3 * 3/4 = 2.5, which is softmax([0, log 3]) . [1, 3] = (1 + 9) / 4.
//
// Backward is attention_backward's with the final (merged) out and lse: p = exp(s - lse),
// D_t = dout_t . out_t, ds = p (dout_t . v_j - D_t) / sqrt(hd); dq += ds k, dk += ds q,
// dv += p dout over the block's visible pairs. As there, queries own dq and keys own dk,
// dv (two race-free passes, or one pass per (batch, kv head) when there are enough of
// them), so the sums are the same for any thread count.
#include <algorithm>
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

struct Index {
  const AttentionBlockShape& s;
  size_t q(int b, int t, int h) const {
    return (static_cast<size_t>(b) * s.Tq + t) * s.q_stride + static_cast<size_t>(h) * s.hd;
  }
  size_t kv(int b, int j, int g) const {
    return (static_cast<size_t>(b) * s.Tk + j) * s.kv_stride + static_cast<size_t>(g) * s.hd;
  }
  size_t o(int b, int t, int h) const {
    return (static_cast<size_t>(b) * s.Tq + t) * s.H * s.hd + static_cast<size_t>(h) * s.hd;
  }
  size_t l(int b, int h, int t) const { return (static_cast<size_t>(b) * s.H + h) * s.Tq + t; }
};

// n[t]: how many of the block's keys query row t sees (the same for every sequence).
void visible_counts(const AttentionBlockShape& s, std::vector<int>* n) {
  n->resize(static_cast<size_t>(s.Tq));
  for (int t = 0; t < s.Tq; ++t) (*n)[static_cast<size_t>(t)] = s.k_pos.count_upto(s.q_pos.at(t), s.Tk);
}

}  // namespace

void attention_block_forward(float* out, float* lse, const float* q, const float* k,
                             const float* v, const AttentionBlockShape& s) {
  const Index I{s};
  const int group = s.H / s.KV, hd = s.hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<int> visible;
  visible_counts(s, &visible);
  const int* nv = visible.data();
#pragma omp parallel
  {
    thread_local std::vector<float> sc, ob;
    if (sc.size() < static_cast<size_t>(s.Tk)) sc.resize(static_cast<size_t>(s.Tk));
    if (ob.size() < static_cast<size_t>(hd)) ob.resize(static_cast<size_t>(hd));
#pragma omp for collapse(3) schedule(dynamic, 8)
    for (int b = 0; b < s.B; ++b) {
      for (int h = 0; h < s.H; ++h) {
        for (int t = 0; t < s.Tq; ++t) {
          const int n = nv[t];
          if (n == 0) continue;  // nothing of this block is visible: the row is unchanged
          const float* qt = q + I.q(b, t, h);
          const int g = h / group;
          float mx = -INFINITY;
          for (int j = 0; j < n; ++j) {
            sc[j] = dot(qt, k + I.kv(b, j, g), hd) * scale;
            mx = sc[j] > mx ? sc[j] : mx;
          }
          float sum = 0.0f;
          for (int j = 0; j < n; ++j) {
            sc[j] = fast_exp(sc[j] - mx);
            sum += sc[j];
          }
          const float inv = 1.0f / sum;
          for (int i = 0; i < hd; ++i) ob[i] = 0.0f;
          for (int j = 0; j < n; ++j) {
            const float p = sc[j] * inv;
            const float* vj = v + I.kv(b, j, g);
#pragma omp simd
            for (int i = 0; i < hd; ++i) ob[i] += p * vj[i];
          }
          // Merge with what the earlier blocks gave (lse -inf: nothing yet).
          const float lb = mx + std::log(sum);
          float* lt = lse + I.l(b, h, t);
          float* o = out + I.o(b, t, h);
          const float la = *lt;
          const float top = la > lb ? la : lb;
          const float merged = top + std::log(std::exp(la - top) + std::exp(lb - top));
          const float wa = std::exp(la - merged), wb = std::exp(lb - merged);
          for (int i = 0; i < hd; ++i) o[i] = o[i] * wa + ob[i] * wb;
          *lt = merged;
        }
      }
    }
  }
}

void attention_block_backward(float* dq, float* dk, float* dv, const float* dout,
                              const float* out, const float* lse, const float* q, const float* k,
                              const float* v, const AttentionBlockShape& s) {
  const Index I{s};
  const int group = s.H / s.KV, hd = s.hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<int> visible;
  visible_counts(s, &visible);
  const int* nv = visible.data();
  // D[b,h,t] = dout . out, from the merged output (the calling thread's storage).
  thread_local std::vector<float> d_store;
  if (d_store.size() < static_cast<size_t>(s.B) * s.H * s.Tq) d_store.resize(static_cast<size_t>(s.B) * s.H * s.Tq);
  float* const D = d_store.data();
#pragma omp parallel for collapse(3)
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.H; ++h)
      for (int t = 0; t < s.Tq; ++t) D[I.l(b, h, t)] = dot(dout + I.o(b, t, h), out + I.o(b, t, h), hd);

  // One visible (query, key) pair: its probability and score gradient.
  auto pair = [&](int b, int h, int t, int j, int g, float* p) {
    const float* qt = q + I.q(b, t, h);
    *p = fast_exp(dot(qt, k + I.kv(b, j, g), hd) * scale - lse[I.l(b, h, t)]);
    return *p * (dot(dout + I.o(b, t, h), v + I.kv(b, j, g), hd) - D[I.l(b, h, t)]) * scale;
  };
  if (s.B * s.KV >= kSinglePassMinTasks) {
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < s.B; ++b) {
      for (int g = 0; g < s.KV; ++g) {
        for (int h = g * group; h < (g + 1) * group; ++h) {
          for (int t = 0; t < s.Tq; ++t) {
            const float* qt = q + I.q(b, t, h);
            const float* dot_ = dout + I.o(b, t, h);
            float* dqt = dq ? dq + I.q(b, t, h) : nullptr;
            for (int j = 0; j < nv[t]; ++j) {
              float p = 0.0f;
              const float ds = pair(b, h, t, j, g, &p);
              const float* kj = k + I.kv(b, j, g);
              if (dqt) {
#pragma omp simd
                for (int i = 0; i < hd; ++i) dqt[i] += ds * kj[i];
              }
              if (dk) {
                float* d = dk + I.kv(b, j, g);
#pragma omp simd
                for (int i = 0; i < hd; ++i) d[i] += ds * qt[i];
              }
              if (dv) {
                float* d = dv + I.kv(b, j, g);
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
  // Pass 1: queries own dq.
  if (dq != nullptr) {
#pragma omp parallel for collapse(3) schedule(dynamic, 8)
    for (int b = 0; b < s.B; ++b) {
      for (int h = 0; h < s.H; ++h) {
        for (int t = 0; t < s.Tq; ++t) {
          const int g = h / group;
          float* dqt = dq + I.q(b, t, h);
          for (int j = 0; j < nv[t]; ++j) {
            float p = 0.0f;
            const float ds = pair(b, h, t, j, g, &p);
            const float* kj = k + I.kv(b, j, g);
#pragma omp simd
            for (int i = 0; i < hd; ++i) dqt[i] += ds * kj[i];
          }
        }
      }
    }
  }
  // Pass 2: keys own dk and dv, summed over their group's query heads and the queries
  // that see them (nv[t] > j).
  if (dk == nullptr && dv == nullptr) return;
#pragma omp parallel
  {
    thread_local std::vector<float> gk, gv;
    if (gk.size() < static_cast<size_t>(hd)) gk.resize(static_cast<size_t>(hd)), gv.resize(static_cast<size_t>(hd));
#pragma omp for collapse(3) schedule(dynamic, 8)
    for (int b = 0; b < s.B; ++b) {
      for (int g = 0; g < s.KV; ++g) {
        for (int j = 0; j < s.Tk; ++j) {
          for (int i = 0; i < hd; ++i) gk[i] = gv[i] = 0.0f;
          // The queries that see key j: nv rises with t, so they are t >= t0.
          const int t0 = static_cast<int>(std::upper_bound(nv, nv + s.Tq, j) - nv);
          for (int h = g * group; h < (g + 1) * group; ++h) {
            for (int t = t0; t < s.Tq; ++t) {
              float p = 0.0f;
              const float ds = pair(b, h, t, j, g, &p);
              const float* qt = q + I.q(b, t, h);
              const float* dot_ = dout + I.o(b, t, h);
#pragma omp simd
              for (int i = 0; i < hd; ++i) {
                gk[i] += ds * qt[i];
                gv[i] += p * dot_[i];
              }
            }
          }
          if (dk) {
            float* d = dk + I.kv(b, j, g);
            for (int i = 0; i < hd; ++i) d[i] += gk[i];
          }
          if (dv) {
            float* d = dv + I.kv(b, j, g);
            for (int i = 0; i < hd; ++i) d[i] += gv[i];
          }
        }
      }
    }
  }
}

void copy_columns(float* dst, int dst_stride, const float* src, int src_stride, int rows, int cols) {
#pragma omp parallel for
  for (int r = 0; r < rows; ++r) {
    const float* s = src + static_cast<size_t>(r) * src_stride;
    float* d = dst + static_cast<size_t>(r) * dst_stride;
    for (int c = 0; c < cols; ++c) d[c] = s[c];
  }
}

}  // namespace partrain::engine::cpu
