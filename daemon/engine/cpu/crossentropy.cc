// Softmax cross-entropy per row of logits [N, V]; sums in double for a stable lse.
#include <cmath>
#include <cstddef>

#include "engine/cpu/kernels.h"

namespace partrain::engine::cpu {

void crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                          int N, int V) {
#pragma omp parallel for
  for (int n = 0; n < N; ++n) {
    const float* z = logits + static_cast<size_t>(n) * V;
    float mx = z[0];
    for (int i = 1; i < V; ++i) mx = z[i] > mx ? z[i] : mx;
    double sum = 0.0;
    for (int i = 0; i < V; ++i) sum += std::exp(static_cast<double>(z[i] - mx));
    const double l = mx + std::log(sum);
    lse[n] = static_cast<float>(l);
    losses[n] = targets[n] < 0 ? 0.0f : static_cast<float>(l - z[targets[n]]);
  }
}

void crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                           const int32_t* targets, const float* dloss, int N, int V) {
#pragma omp parallel for
  for (int n = 0; n < N; ++n) {
    if (targets[n] < 0) continue;
    const float* z = logits + static_cast<size_t>(n) * V;
    float* dz = dlogits + static_cast<size_t>(n) * V;
    const float dl = dloss[n], l = lse[n];
    for (int i = 0; i < V; ++i) dz[i] += dl * std::exp(z[i] - l);
    dz[targets[n]] -= dl;
  }
}

}  // namespace partrain::engine::cpu
