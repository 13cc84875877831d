// Token (+ learned position) embedding: out[n,:] = wte[tok[n],:] + wpe[n % T,:].
#include <cstddef>

#include "engine/cpu/kernels.h"

namespace partrain::engine::cpu {

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int B, int T, int C) {
  const int N = B * T;
#pragma omp parallel for
  for (int n = 0; n < N; ++n) {
    float* o = out + static_cast<size_t>(n) * C;
    const float* e = wte + static_cast<size_t>(tokens[n]) * C;
    if (wpe != nullptr) {
      const float* p = wpe + static_cast<size_t>(n % T) * C;
      for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
    } else {
      for (int c = 0; c < C; ++c) o[c] = e[c];
    }
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int B, int T, int C) {
  const int N = B * T;
  // dwte: a token may repeat, so each thread owns a block of channels and walks all tokens
  // in order; the sum order is then fixed whatever the thread count (bit-reproducible).
  if (dwte != nullptr) {
    constexpr int kBlock = 64;
    const int blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for
    for (int blk = 0; blk < blocks; ++blk) {
      const int c0 = blk * kBlock, c1 = c0 + kBlock < C ? c0 + kBlock : C;
      for (int n = 0; n < N; ++n) {
        float* g = dwte + static_cast<size_t>(tokens[n]) * C;
        const float* d = dout + static_cast<size_t>(n) * C;
        for (int c = c0; c < c1; ++c) g[c] += d[c];
      }
    }
  }
  if (dwpe != nullptr) {
#pragma omp parallel for
    for (int t = 0; t < T; ++t) {
      float* g = dwpe + static_cast<size_t>(t) * C;
      for (int b = 0; b < B; ++b) {
        const float* d = dout + (static_cast<size_t>(b) * T + t) * C;
        for (int c = 0; c < C; ++c) g[c] += d[c];
      }
    }
  }
}

}  // namespace partrain::engine::cpu
