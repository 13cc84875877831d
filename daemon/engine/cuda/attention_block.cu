// Context-parallel attention blocks on the GPU: the twin of engine/cpu/attention_block.cc
// (see its header for the math and a worked example of the log-sum-exp merge). One warp per
// query row (forward, dq) or key row (dk, dv); lane l holds head-dim elements l, l+32, ...
// (KD = hd/32 rounded up, at most 8, so hd <= 256); scores are warp sums; keys are visited in
// order, queries in (head, position) order, so every sum has a fixed order (no atomics) and
// a rerun gives the same bits. Key j of the block is visible to query t when k_pos(j) <=
// q_pos(t); positions rise with the row, so those keys are the block's first n_t rows.
// Correctness first: plain fp32 FMA, no tensor cores (cp attention is a test path today).
#include "engine/cuda/common.cuh"

namespace partrain::engine::cuda {
namespace {

constexpr int kWarps = 8;  // rows per block

__device__ __forceinline__ int visible(const AttentionBlockArgs& a, int t) {
  return a.k_pos.count_upto(a.q_pos.at(t), a.Tk);
}

template <typename Act, int KD>
__device__ __forceinline__ void load_row(float (&x)[KD], const Act* row, int hd, int lane, float scale = 1.0f) {
#pragma unroll
  for (int i = 0; i < KD; ++i) {
    const int d = lane + 32 * i;
    x[i] = d < hd ? to_f32(row[d]) * scale : 0.0f;
  }
}

template <typename Act, int KD>
__device__ __forceinline__ float dot_row(const float (&x)[KD], const Act* row, int hd, int lane) {
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < KD; ++i) {
    const int d = lane + 32 * i;
    if (d < hd) s += x[i] * to_f32(row[d]);
  }
  return warp_sum(s);
}

template <typename Act, int KD>
__global__ void block_forward_kernel(Act* out, float* lse, const Act* q, const Act* k, const Act* v,
                                     AttentionBlockArgs a, float scale) {
  const int lane = threadIdx.x % 32;
  const size_t r = blockIdx.x * static_cast<size_t>(kWarps) + threadIdx.x / 32;  // (b*H + h)*Tq + t
  if (r >= static_cast<size_t>(a.B) * a.H * a.Tq) return;
  const int t = static_cast<int>(r % a.Tq), h = static_cast<int>((r / a.Tq) % a.H);
  const int b = static_cast<int>(r / (static_cast<size_t>(a.Tq) * a.H)), g = h / (a.H / a.KV);
  const int n = visible(a, t);
  if (n == 0) return;  // nothing of this block is visible: the row is unchanged
  float qr[KD], acc[KD];
  load_row<Act, KD>(qr, q + (static_cast<size_t>(b) * a.Tq + t) * a.q_stride + static_cast<size_t>(h) * a.hd, a.hd,
                    lane, scale);
#pragma unroll
  for (int i = 0; i < KD; ++i) acc[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int j = 0; j < n; ++j) {
    const size_t kv = (static_cast<size_t>(b) * a.Tk + j) * a.kv_stride + static_cast<size_t>(g) * a.hd;
    const float s = dot_row<Act, KD>(qr, k + kv, a.hd, lane);
    if (s > m) {
      const float corr = expf(m - s);
      l *= corr;
#pragma unroll
      for (int i = 0; i < KD; ++i) acc[i] *= corr;
      m = s;
    }
    const float p = expf(s - m);
    l += p;
#pragma unroll
    for (int i = 0; i < KD; ++i) {
      const int d = lane + 32 * i;
      if (d < a.hd) acc[i] += p * to_f32(v[kv + d]);
    }
  }
  // Merge with the earlier blocks (lse -inf: none yet).
  const float lb = m + logf(l), la = lse[r];
  const float top = la > lb ? la : lb;
  const float merged = top + logf(expf(la - top) + expf(lb - top));
  const float wa = expf(la - merged), wb = expf(lb - merged) / l;
  Act* o = out + (static_cast<size_t>(b) * a.Tq + t) * a.H * a.hd + static_cast<size_t>(h) * a.hd;
#pragma unroll
  for (int i = 0; i < KD; ++i) {
    const int d = lane + 32 * i;
    if (d < a.hd) o[d] = from_f32<Act>(to_f32(o[d]) * wa + acc[i] * wb);
  }
  if (lane == 0) lse[r] = merged;
}

// delta[(b*H + h)*Tq + t] = dout . out of that row.
template <typename Act>
__global__ void block_delta_kernel(float* delta, const Act* dout, const Act* out, AttentionBlockArgs a) {
  const int lane = threadIdx.x % 32;
  const size_t r = blockIdx.x * static_cast<size_t>(kWarps) + threadIdx.x / 32;
  if (r >= static_cast<size_t>(a.B) * a.H * a.Tq) return;
  const int t = static_cast<int>(r % a.Tq), h = static_cast<int>((r / a.Tq) % a.H);
  const int b = static_cast<int>(r / (static_cast<size_t>(a.Tq) * a.H));
  const size_t at = (static_cast<size_t>(b) * a.Tq + t) * a.H * a.hd + static_cast<size_t>(h) * a.hd;
  float s = 0.0f;
  for (int d = lane; d < a.hd; d += 32) s += to_f32(dout[at + d]) * to_f32(out[at + d]);
  s = warp_sum(s);
  if (lane == 0) delta[r] = s;
}

// dq[t] += scale * sum_j p (dout . v_j - D) k_j over the block's visible keys.
template <typename Act, int KD>
__global__ void block_dq_kernel(Act* dq, const Act* dout, const float* lse, const float* delta, const Act* q,
                                const Act* k, const Act* v, AttentionBlockArgs a, float scale) {
  const int lane = threadIdx.x % 32;
  const size_t r = blockIdx.x * static_cast<size_t>(kWarps) + threadIdx.x / 32;
  if (r >= static_cast<size_t>(a.B) * a.H * a.Tq) return;
  const int t = static_cast<int>(r % a.Tq), h = static_cast<int>((r / a.Tq) % a.H);
  const int b = static_cast<int>(r / (static_cast<size_t>(a.Tq) * a.H)), g = h / (a.H / a.KV);
  const int n = visible(a, t);
  if (n == 0) return;
  const size_t qat = (static_cast<size_t>(b) * a.Tq + t) * a.q_stride + static_cast<size_t>(h) * a.hd;
  float qr[KD], dor[KD], acc[KD];
  load_row<Act, KD>(qr, q + qat, a.hd, lane, scale);
  load_row<Act, KD>(dor, dout + (static_cast<size_t>(b) * a.Tq + t) * a.H * a.hd + static_cast<size_t>(h) * a.hd,
                    a.hd, lane);
#pragma unroll
  for (int i = 0; i < KD; ++i) acc[i] = 0.0f;
  const float L = lse[r], D = delta[r];
  for (int j = 0; j < n; ++j) {
    const size_t kv = (static_cast<size_t>(b) * a.Tk + j) * a.kv_stride + static_cast<size_t>(g) * a.hd;
    const float p = expf(dot_row<Act, KD>(qr, k + kv, a.hd, lane) - L);
    const float ds = p * (dot_row<Act, KD>(dor, v + kv, a.hd, lane) - D) * scale;
#pragma unroll
    for (int i = 0; i < KD; ++i) {
      const int d = lane + 32 * i;
      if (d < a.hd) acc[i] += ds * to_f32(k[kv + d]);
    }
  }
#pragma unroll
  for (int i = 0; i < KD; ++i) {
    const int d = lane + 32 * i;
    if (d < a.hd) dq[qat + d] = from_f32<Act>(to_f32(dq[qat + d]) + acc[i]);
  }
}

// Key row j of kv head g: dk += sum ds q_t, dv += sum p dout_t over the group's query heads
// and the queries that see it.
template <typename Act, int KD>
__global__ void block_dkv_kernel(Act* dk, Act* dv, const Act* dout, const float* lse, const float* delta,
                                 const Act* q, const Act* k, const Act* v, AttentionBlockArgs a, float scale) {
  const int lane = threadIdx.x % 32;
  const size_t r = blockIdx.x * static_cast<size_t>(kWarps) + threadIdx.x / 32;  // (b*KV + g)*Tk + j
  if (r >= static_cast<size_t>(a.B) * a.KV * a.Tk) return;
  const int j = static_cast<int>(r % a.Tk), g = static_cast<int>((r / a.Tk) % a.KV);
  const int b = static_cast<int>(r / (static_cast<size_t>(a.Tk) * a.KV)), group = a.H / a.KV;
  const size_t kv = (static_cast<size_t>(b) * a.Tk + j) * a.kv_stride + static_cast<size_t>(g) * a.hd;
  float kr[KD], vr[KD], gk[KD], gv[KD];
  load_row<Act, KD>(kr, k + kv, a.hd, lane, scale);
  load_row<Act, KD>(vr, v + kv, a.hd, lane);
#pragma unroll
  for (int i = 0; i < KD; ++i) gk[i] = gv[i] = 0.0f;
  for (int h = g * group; h < (g + 1) * group; ++h) {
    for (int t = 0; t < a.Tq; ++t) {
      if (visible(a, t) <= j) continue;
      const size_t l = (static_cast<size_t>(b) * a.H + h) * a.Tq + t;
      const Act* qt = q + (static_cast<size_t>(b) * a.Tq + t) * a.q_stride + static_cast<size_t>(h) * a.hd;
      const Act* dt = dout + (static_cast<size_t>(b) * a.Tq + t) * a.H * a.hd + static_cast<size_t>(h) * a.hd;
      const float p = expf(dot_row<Act, KD>(kr, qt, a.hd, lane) - lse[l]);
      const float ds = p * (dot_row<Act, KD>(vr, dt, a.hd, lane) - delta[l]) * scale;
#pragma unroll
      for (int i = 0; i < KD; ++i) {
        const int d = lane + 32 * i;
        if (d < a.hd) {
          gk[i] += ds * to_f32(qt[d]);
          gv[i] += p * to_f32(dt[d]);
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < KD; ++i) {
    const int d = lane + 32 * i;
    if (d >= a.hd) continue;
    if (dk != nullptr) dk[kv + d] = from_f32<Act>(to_f32(dk[kv + d]) + gk[i]);
    if (dv != nullptr) dv[kv + d] = from_f32<Act>(to_f32(dv[kv + d]) + gv[i]);
  }
}

Status check_args(const AttentionBlockArgs& a) {
  if (a.KV <= 0 || a.H % a.KV != 0) return Status::invalid("attention block: heads must be a multiple of kv_heads");
  if (a.hd <= 0 || a.hd > 256) return Status::invalid("attention block: head dim must be in 1..256");
  return Status::ok();
}

// Calls f with KD = ceil(hd / 32) rounded up to 1, 2, 4 or 8.
template <typename F>
Status with_kd(int hd, F&& f) {
  if (hd <= 32) return f(std::integral_constant<int, 1>{});
  if (hd <= 64) return f(std::integral_constant<int, 2>{});
  if (hd <= 128) return f(std::integral_constant<int, 4>{});
  return f(std::integral_constant<int, 8>{});
}

unsigned blocks_for(size_t rows) { return static_cast<unsigned>((rows + kWarps - 1) / kWarps); }

}  // namespace

template <typename Act>
Status attention_block_forward(const Context& ctx, Act* out, float* lse, const Act* q, const Act* k, const Act* v,
                               const AttentionBlockArgs& a) {
  PARTRAIN_RETURN_IF_ERROR(check_args(a));
  const size_t rows = static_cast<size_t>(a.B) * a.H * a.Tq;
  if (rows == 0 || a.Tk == 0) return Status::ok();
  const float scale = 1.0f / sqrtf(static_cast<float>(a.hd));
  return with_kd(a.hd, [&](auto c) {
    constexpr int KD = decltype(c)::value;
    block_forward_kernel<Act, KD><<<blocks_for(rows), 32 * kWarps, 0, ctx.stream>>>(out, lse, q, k, v, a, scale);
    return launch_status("attention_block_forward");
  });
}

template <typename Act>
Status attention_block_backward(const Context& ctx, Act* dq, Act* dk, Act* dv, const Act* dout, const Act* out,
                                const float* lse, const Act* q, const Act* k, const Act* v,
                                const AttentionBlockArgs& a, float* delta) {
  PARTRAIN_RETURN_IF_ERROR(check_args(a));
  const size_t rows = static_cast<size_t>(a.B) * a.H * a.Tq, keys = static_cast<size_t>(a.B) * a.KV * a.Tk;
  if (rows == 0 || keys == 0) return Status::ok();
  const float scale = 1.0f / sqrtf(static_cast<float>(a.hd));
  block_delta_kernel<Act><<<blocks_for(rows), 32 * kWarps, 0, ctx.stream>>>(delta, dout, out, a);
  PARTRAIN_RETURN_IF_ERROR(launch_status("attention_block_backward(delta)"));
  return with_kd(a.hd, [&](auto c) {
    constexpr int KD = decltype(c)::value;
    if (dq != nullptr) {
      block_dq_kernel<Act, KD><<<blocks_for(rows), 32 * kWarps, 0, ctx.stream>>>(dq, dout, lse, delta, q, k, v, a,
                                                                                   scale);
      PARTRAIN_RETURN_IF_ERROR(launch_status("attention_block_backward(dq)"));
    }
    if (dk != nullptr || dv != nullptr) {
      block_dkv_kernel<Act, KD><<<blocks_for(keys), 32 * kWarps, 0, ctx.stream>>>(dk, dv, dout, lse, delta, q, k, v,
                                                                                    a, scale);
      PARTRAIN_RETURN_IF_ERROR(launch_status("attention_block_backward(dk, dv)"));
    }
    return Status::ok();
  });
}

#define PARTRAIN_INSTANTIATE(Act)                                                                          \
  template Status attention_block_forward<Act>(const Context&, Act*, float*, const Act*, const Act*,       \
                                               const Act*, const AttentionBlockArgs&);                     \
  template Status attention_block_backward<Act>(const Context&, Act*, Act*, Act*, const Act*, const Act*,  \
                                                const float*, const Act*, const Act*, const Act*,          \
                                                const AttentionBlockArgs&, float*);
PARTRAIN_INSTANTIATE(float)
PARTRAIN_INSTANTIATE(bf16)
#undef PARTRAIN_INSTANTIATE

}  // namespace partrain::engine::cuda
