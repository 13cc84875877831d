// Causal self-attention with grouped-query heads, flash-style: forward keeps only the
// log-sum-exp of each row's scaled scores; backward recomputes the probabilities from it.
//
//   s[t,j] = q_t . k_j / sqrt(hd)  (j <= t)     p[t,j] = exp(s[t,j] - lse_t)
//   out_t  = sum_j p[t,j] v_j
//   backward, with D_t = dout_t . out_t and dp[t,j] = dout_t . v_j:
//   ds[t,j] = p[t,j] (dp[t,j] - D_t);  dq_t += ds k / sqrt(hd);  dk_j += ds q / sqrt(hd);
//   dv_j += p dout_t
// Backward runs two race-free passes (queries own dq; keys own dk, dv) so it is
// deterministic for any thread count. The loops are those of the context-parallel blocks
// (attention_block.cc), of which one rank's attention is the one-block case.
#include <cmath>
#include <cstddef>

#include "engine/cpu/kernels.h"

namespace partrain::engine::cpu {

// One rank's attention is one block: every query of the whole sequence against every key,
// causal by position (attention_block.cc runs the loops; merged into an empty result it
// leaves exactly the block's softmax).
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       int B, int T, int H, int KV, int hd, int q_stride, int kv_stride) {
  const size_t rows = static_cast<size_t>(B) * H * T;
  for (size_t i = 0; i < rows; ++i) lse[i] = -INFINITY;
  for (size_t i = 0; i < rows * static_cast<size_t>(hd); ++i) out[i] = 0.0f;
  attention_block_forward(out, lse, q, k, v, AttentionBlockShape{B, T, T, H, KV, hd, q_stride, kv_stride, {}, {}});
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                        const float* lse, const float* q, const float* k, const float* v, int B,
                        int T, int H, int KV, int hd, int q_stride, int kv_stride) {
  attention_block_backward(dq, dk, dv, dout, out, lse, q, k, v,
                           AttentionBlockShape{B, T, T, H, KV, hd, q_stride, kv_stride, {}, {}});
}

}  // namespace partrain::engine::cpu
