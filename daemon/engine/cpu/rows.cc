// MoE row gather/scatter (see rows.h).
#include "engine/cpu/rows.h"

#include <cstddef>

namespace partrain::engine::cpu {

void gather_rows(float* out, const float* inp, const int32_t* idx, const float* weight, int M,
                 int C) {
#pragma omp parallel for
  for (int i = 0; i < M; ++i) {
    const float* src = inp + static_cast<size_t>(idx[i]) * C;
    float* dst = out + static_cast<size_t>(i) * C;
    const float w = weight ? weight[i] : 1.0f;
    for (int c = 0; c < C; ++c) dst[c] = w * src[c];
  }
}

void scatter_add_rows(float* out, const float* inp, const int32_t* idx, const float* weight,
                      int M, int C) {
#pragma omp parallel for
  for (int i = 0; i < M; ++i) {
    float* dst = out + static_cast<size_t>(idx[i]) * C;
    const float* src = inp + static_cast<size_t>(i) * C;
    const float w = weight ? weight[i] : 1.0f;
    for (int c = 0; c < C; ++c) dst[c] += w * src[c];
  }
}

void gathered_row_dot(float* out, const float* a, const int32_t* idx, const float* b, int M,
                      int C) {
#pragma omp parallel for
  for (int i = 0; i < M; ++i) {
    const float* x = a + static_cast<size_t>(idx[i]) * C;
    const float* y = b + static_cast<size_t>(i) * C;
    double s = 0.0;
    for (int c = 0; c < C; ++c) s += static_cast<double>(x[c]) * y[c];
    out[i] = static_cast<float>(s);
  }
}

}  // namespace partrain::engine::cpu
