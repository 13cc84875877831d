// Row movement for mixture-of-experts dispatch and combine (CPU reference). Routing
// itself runs on the host; these copy token rows into an expert's packed input and add
// the weighted expert outputs back. Same conventions as kernels.h. Indices in one call
// are unique (a token goes to a given expert at most once), so scatters never collide.
#pragma once

#include <cstdint>

namespace partrain::engine::cpu {

// out[i,:] = weight[i] * inp[idx[i],:]   (weight null = 1); out [M,C] overwritten.
void gather_rows(float* out, const float* inp, const int32_t* idx, const float* weight, int M,
                 int C);
// out[idx[i],:] += weight[i] * inp[i,:]  (weight null = 1); out [N,C] accumulated.
void scatter_add_rows(float* out, const float* inp, const int32_t* idx, const float* weight,
                      int M, int C);
// out[i] = dot(a[idx[i],:], b[i,:]) accumulated in double; out [M] overwritten.
void gathered_row_dot(float* out, const float* a, const int32_t* idx, const float* b, int M,
                      int C);

}  // namespace partrain::engine::cpu
