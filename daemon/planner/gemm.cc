// The GEMM time model (see gemm.h).
#include "planner/gemm.h"

#include <algorithm>
#include <cmath>

namespace partrain::planner {

double gemm_seconds(const GemmShape& g, const HardwareProfile& hw, double element_bytes) {
  if (g.m <= 0 || g.n <= 0 || g.k <= 0 || g.batch <= 0) return 0;
  double wave = 1;
  if (hw.sm_count >= 1) {
    const double tiles =
        g.batch * std::min(std::ceil(g.m / 128) * std::ceil(g.n / 256),
                           std::ceil(g.m / 256) * std::ceil(g.n / 128));
    const double waves = std::ceil(tiles / hw.sm_count);
    wave = tiles / (waves * hw.sm_count);
  }
  const double rate =
      hw.peak() * hw.sustained_clock * hw.matmul_efficiency * wave * g.k / (g.k + hw.gemm_k_half);
  const double math = 2 * g.m * g.n * g.k * g.batch / rate;
  const double bytes = element_bytes * (g.m * g.k + g.k * g.n + g.m * g.n) * g.batch;
  return std::max(math, bytes / hw.memory_bandwidth) + hw.kernel_overhead;
}

double gemm_rate(const GemmShape& g, const HardwareProfile& hw, double element_bytes) {
  const double t = gemm_seconds(g, hw, element_bytes);
  return t > 0 ? 2 * g.m * g.n * g.k * g.batch / t : 0;
}

GemmTimes linear_seconds(double m, double n, double k, const HardwareProfile& hw,
                         double element_bytes) {
  GemmTimes t;
  t.forward = gemm_seconds({m, n, k}, hw, element_bytes);
  t.backward = gemm_seconds({m, k, n}, hw, element_bytes) + gemm_seconds({k, n, m}, hw, element_bytes);
  return t;
}

double fused_attention_rate(const HardwareProfile& hw, bool fa2, double seq, double head_dim) {
  const double ceiling = fa2 ? hw.attention_efficiency_fa2 : hw.attention_efficiency;
  const double h = hw.attention_head_dim_half;
  const double dim = head_dim > 0 ? (head_dim / (head_dim + h)) / (128 / (128 + h)) : 1;
  const double len = seq > 0 ? seq / (seq + hw.attention_seq_half) : 1;
  return hw.peak() * hw.sustained_clock * ceiling * len * dim;
}

}  // namespace partrain::planner
