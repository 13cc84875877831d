// Dropout with a counter-based mask: element i is kept iff philox_uniform(seed, offset + i)
// >= p. The mask is a function of (seed, position) only, so backward regenerates it and
// a split model (or another device) draws the same one.
#include <cstddef>

#include "engine/cpu/kernels.h"
#include "engine/philox.h"

namespace partrain::engine::cpu {
namespace {

void apply_mask(float* out, const float* inp, size_t n, float p, uint64_t seed, uint64_t offset,
                bool accumulate) {
  const float keep_scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
#pragma omp parallel for
  for (size_t i = 0; i < n; ++i) {
    const float y = philox_uniform(seed, offset + i) >= p ? inp[i] * keep_scale : 0.0f;
    out[i] = accumulate ? out[i] + y : y;
  }
}

}  // namespace

void dropout_forward(float* out, const float* inp, size_t n, float p, uint64_t seed,
                     uint64_t offset) {
  apply_mask(out, inp, n, p, seed, offset, false);
}

void dropout_backward(float* dinp, const float* dout, size_t n, float p, uint64_t seed,
                      uint64_t offset) {
  apply_mask(dinp, dout, n, p, seed, offset, true);
}

}  // namespace partrain::engine::cpu
