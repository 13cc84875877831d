// Rotary position embedding, Hugging Face rotate_half convention: for i < hd/2 the pair
// (x_i, x_{i+hd/2}) at position p is rotated by angle p * theta^(-2i/hd); row t of each
// sequence is at position pos.at(t) (t itself unless the rank holds cp chunks). The frequencies
// and angles are formed in fp32 as Hugging Face does, cos/sin rounded from double.
// Backward rotates by -angle. It WRITES dinp (not +=): it is applied in place to the
// q/k part of a packed gradient buffer, so dinp may alias dout, as out may alias inp.
#include <cmath>
#include <cstddef>
#include <vector>

#include "engine/cpu/kernels.h"

namespace partrain::engine::cpu {
namespace {

void rotate(float* out, const float* inp, int B, int T, int heads, int hd, int stride,
            float theta, float sign, const SeqPositions& pos) {
  const int half = hd / 2;
  // The calling thread's storage (no allocation in the step loop), shared with the OpenMP
  // threads through the pointer.
  thread_local std::vector<float> freq_store;
  freq_store.resize(static_cast<size_t>(half));
  float* const inv_freq = freq_store.data();
  for (int i = 0; i < half; ++i) {
    inv_freq[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(hd));
  }
#pragma omp parallel for collapse(2)
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const size_t row = (static_cast<size_t>(b) * T + t) * stride;
      for (int i = 0; i < half; ++i) {
        const float angle = static_cast<float>(pos.at(t)) * inv_freq[i];
        const float c = static_cast<float>(std::cos(static_cast<double>(angle)));
        const float s = sign * static_cast<float>(std::sin(static_cast<double>(angle)));
        for (int h = 0; h < heads; ++h) {
          const size_t base = row + static_cast<size_t>(h) * hd;
          const float x1 = inp[base + i], x2 = inp[base + i + half];
          out[base + i] = x1 * c - x2 * s;
          out[base + i + half] = x2 * c + x1 * s;
        }
      }
    }
  }
}

}  // namespace

void rope_forward(float* out, const float* inp, int B, int T, int heads, int hd, int stride,
                  float theta, const SeqPositions& pos) {
  rotate(out, inp, B, T, heads, hd, stride, theta, 1.0f, pos);
}

void rope_backward(float* dinp, const float* dout, int B, int T, int heads, int hd, int stride,
                   float theta, const SeqPositions& pos) {
  rotate(dinp, dout, B, T, heads, hd, stride, theta, -1.0f, pos);
}

}  // namespace partrain::engine::cpu
