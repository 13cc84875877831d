// LayerNorm and RMSNorm over the last dimension. Row statistics are accumulated in double
// (cheap next to the GEMMs, and it keeps fp32 results within an ulp of the exact value).
// Weight/bias gradients are summed over rows in row order by the thread owning a block of
// channels, so results do not depend on the thread count.
#include <cmath>
#include <cstddef>

#include "engine/cpu/kernels.h"

namespace partrain::engine::cpu {
namespace {

constexpr int kChannelBlock = 64;

// dw[c] += sum_n dout[n,c] * xhat[n,c] (and db[c] += sum_n dout[n,c]), xhat recomputed as
// (inp - mean) * rstd (mean null for RMSNorm).
void norm_param_grads(float* dw, float* db, const float* dout, const float* inp,
                      const float* mean, const float* rstd, int N, int C) {
  if (dw == nullptr && db == nullptr) return;
  const int blocks = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for
  for (int blk = 0; blk < blocks; ++blk) {
    const int c0 = blk * kChannelBlock, c1 = c0 + kChannelBlock < C ? c0 + kChannelBlock : C;
    for (int n = 0; n < N; ++n) {
      const float* d = dout + static_cast<size_t>(n) * C;
      const float* x = inp + static_cast<size_t>(n) * C;
      const float mu = mean ? mean[n] : 0.0f, rs = rstd[n];
      for (int c = c0; c < c1; ++c) {
        if (dw) dw[c] += d[c] * ((x[c] - mu) * rs);
        if (db) db[c] += d[c];
      }
    }
  }
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, int N, int C, float eps) {
#pragma omp parallel for
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<size_t>(n) * C;
    double s = 0.0;
    for (int c = 0; c < C; ++c) s += x[c];
    const double mu = s / C;
    double v = 0.0;
    for (int c = 0; c < C; ++c) v += (x[c] - mu) * (x[c] - mu);
    const float m = static_cast<float>(mu);
    const float rs = static_cast<float>(1.0 / std::sqrt(v / C + eps));
    float* o = out + static_cast<size_t>(n) * C;
    for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * rs * w[c] + (b ? b[c] : 0.0f);
    if (mean) mean[n] = m;
    if (rstd) rstd[n] = rs;
  }
}

void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, int N, int C) {
  // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * w.
  if (dinp != nullptr) {
#pragma omp parallel for
    for (int n = 0; n < N; ++n) {
      const float* d = dout + static_cast<size_t>(n) * C;
      const float* x = inp + static_cast<size_t>(n) * C;
      const float mu = mean[n], rs = rstd[n];
      double sg = 0.0, sgx = 0.0;
      for (int c = 0; c < C; ++c) {
        const float g = d[c] * w[c];
        sg += g;
        sgx += static_cast<double>(g) * ((x[c] - mu) * rs);
      }
      const float mg = static_cast<float>(sg / C), mgx = static_cast<float>(sgx / C);
      float* di = dinp + static_cast<size_t>(n) * C;
      for (int c = 0; c < C; ++c) {
        const float xhat = (x[c] - mu) * rs;
        di[c] += rs * (d[c] * w[c] - mg - xhat * mgx);
      }
    }
  }
  norm_param_grads(dw, db, dout, inp, mean, rstd, N, C);
}

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int N, int C,
                     float eps) {
#pragma omp parallel for
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<size_t>(n) * C;
    double ss = 0.0;
    for (int c = 0; c < C; ++c) ss += static_cast<double>(x[c]) * x[c];
    const float rs = static_cast<float>(1.0 / std::sqrt(ss / C + eps));
    float* o = out + static_cast<size_t>(n) * C;
    for (int c = 0; c < C; ++c) o[c] = x[c] * rs * w[c];
    if (rstd) rstd[n] = rs;
  }
}

void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                      const float* rstd, int N, int C) {
  // dx = rstd * (g - xhat * mean(g * xhat)) with g = dout * w, xhat = x * rstd.
  if (dinp != nullptr) {
#pragma omp parallel for
    for (int n = 0; n < N; ++n) {
      const float* d = dout + static_cast<size_t>(n) * C;
      const float* x = inp + static_cast<size_t>(n) * C;
      const float rs = rstd[n];
      double sgx = 0.0;
      for (int c = 0; c < C; ++c) sgx += static_cast<double>(d[c] * w[c]) * (x[c] * rs);
      const float mgx = static_cast<float>(sgx / C);
      float* di = dinp + static_cast<size_t>(n) * C;
      for (int c = 0; c < C; ++c) di[c] += rs * (d[c] * w[c] - x[c] * rs * mgx);
    }
  }
  norm_param_grads(dw, nullptr, dout, inp, nullptr, rstd, N, C);
}

}  // namespace partrain::engine::cpu
