// Pointwise nonlinearities of the MLP: GELU (tanh approximation, GPT-2) and SwiGLU (LLaMA).
#include <cmath>
#include <cstddef>

#include "engine/cpu/fast_math.h"
#include "engine/cpu/kernels.h"

namespace partrain::engine::cpu {
namespace {
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
}

// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
void gelu_forward(float* out, const float* inp, size_t n) {
#pragma omp parallel for simd
  for (size_t i = 0; i < n; ++i) {
    const float x = inp[i];
    out[i] = 0.5f * x * (1.0f + fast_tanh(kGeluScale * (x + 0.044715f * x * x * x)));
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
#pragma omp parallel for simd
  for (size_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kGeluScale * (x + 0.044715f * x * x * x);
    const float th = fast_tanh(u);
    const float sech2 = 1.0f - th * th;
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] += grad * dout[i];
  }
}

// out = silu(gate) * up, silu(g) = g * sigmoid(g).
void swiglu_forward(float* out, const float* inp, int N, int F) {
#pragma omp parallel for
  for (int n = 0; n < N; ++n) {
    const float* g = inp + static_cast<size_t>(n) * 2 * F;
    const float* u = g + F;
    float* o = out + static_cast<size_t>(n) * F;
#pragma omp simd
    for (int i = 0; i < F; ++i) o[i] = g[i] * fast_sigmoid(g[i]) * u[i];
  }
}

// d gate = dout * up * sig * (1 + g (1 - sig));  d up = dout * silu(g).
void swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F) {
#pragma omp parallel for
  for (int n = 0; n < N; ++n) {
    const float* g = inp + static_cast<size_t>(n) * 2 * F;
    const float* u = g + F;
    const float* d = dout + static_cast<size_t>(n) * F;
    float* dg = dinp + static_cast<size_t>(n) * 2 * F;
    float* du = dg + F;
#pragma omp simd
    for (int i = 0; i < F; ++i) {
      const float sig = fast_sigmoid(g[i]);
      dg[i] += d[i] * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
      du[i] += d[i] * g[i] * sig;
    }
  }
}

}  // namespace partrain::engine::cpu
