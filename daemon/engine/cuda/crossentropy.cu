// Softmax cross-entropy over vocabulary rows, one block per row: an online max/sum pass
// gives lse in fp32, then the loss (lse - z[target]) and, for backward, the gradient
// dloss * (softmax - onehot). The fused variant writes that gradient in place over the
// logits, so the [N, V] logits buffer is the only one the LM head needs (llm.c's trick).
#include "engine/cuda/common.cuh"

namespace partrain::engine::cuda {
namespace {

constexpr int kBlock = 512;

// Log-sum-exp of z[0..V) over the block.
template <typename Act>
__device__ float row_lse(const Act* z, int V) {
  float m = -INFINITY, s = 0.0f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    const float x = to_f32(z[i]);
    if (x > m) {
      s = s * expf(m - x) + 1.0f;
      m = x;
    } else {
      s += expf(x - m);
    }
  }
  const float mx = block_max(m);
  const float total = block_sum(m == -INFINITY ? 0.0f : s * expf(m - mx));
  return mx + logf(total);
}

template <typename Act>
__global__ void crossentropy_forward_kernel(float* losses, float* lse, const Act* logits,
                                            const int32_t* targets, int V, int Vp) {
  const size_t n = blockIdx.x;
  const Act* z = logits + n * Vp;
  const float l = row_lse(z, V);
  if (threadIdx.x == 0) {
    const int target = targets[n];
    if (lse != nullptr) lse[n] = l;
    losses[n] = target < 0 ? 0.0f : l - to_f32(z[target]);
  }
}

template <typename Act>
__global__ void crossentropy_backward_kernel(Act* dlogits, const Act* logits, const float* lse,
                                             const int32_t* targets, const float* dloss, int V,
                                             int Vp) {
  const size_t n = blockIdx.x;
  const int target = targets[n];
  if (target < 0) return;
  const Act* z = logits + n * Vp;
  Act* dz = dlogits + n * Vp;
  const float dl = dloss[n], l = lse[n];
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    const float g = dl * expf(to_f32(z[i]) - l) - (i == target ? dl : 0.0f);
    dz[i] = from_f32<Act>(to_f32(dz[i]) + g);
  }
}

template <typename Act>
__global__ void crossentropy_fused_kernel(float* losses, Act* logits, const int32_t* targets,
                                          float dloss_scale, int V, int Vp) {
  const size_t n = blockIdx.x;
  Act* z = logits + n * Vp;
  const int target = targets[n];
  const float l = row_lse(z, V);
  if (threadIdx.x == 0) losses[n] = target < 0 ? 0.0f : l - to_f32(z[target]);
  __syncthreads();  // the target logit is read above before it is overwritten below
  const float dl = target < 0 ? 0.0f : dloss_scale;
  for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
    const float g = i < V ? dl * (expf(to_f32(z[i]) - l) - (i == target ? 1.0f : 0.0f)) : 0.0f;
    z[i] = from_f32<Act>(g);
  }
}

}  // namespace

template <typename Act>
Status crossentropy_forward(const Context& ctx, float* losses, float* lse, const Act* logits,
                            const int32_t* targets, int N, int V, int Vp) {
  if (N == 0) return Status::ok();
  crossentropy_forward_kernel<<<N, kBlock, 0, ctx.stream>>>(losses, lse, logits, targets, V, Vp);
  return launch_status("crossentropy_forward");
}

template <typename Act>
Status crossentropy_backward(const Context& ctx, Act* dlogits, const Act* logits, const float* lse,
                             const int32_t* targets, const float* dloss, int N, int V, int Vp) {
  if (N == 0) return Status::ok();
  crossentropy_backward_kernel<<<N, kBlock, 0, ctx.stream>>>(dlogits, logits, lse, targets, dloss,
                                                              V, Vp);
  return launch_status("crossentropy_backward");
}

template <typename Act>
Status crossentropy_fused(const Context& ctx, float* losses, Act* logits, const int32_t* targets,
                          float dloss_scale, int N, int V, int Vp) {
  if (N == 0) return Status::ok();
  crossentropy_fused_kernel<<<N, kBlock, 0, ctx.stream>>>(losses, logits, targets, dloss_scale, V,
                                                           Vp);
  return launch_status("crossentropy_fused");
}

#define PARTRAIN_INSTANTIATE(Act)                                                              \
  template Status crossentropy_forward<Act>(const Context&, float*, float*, const Act*,        \
                                            const int32_t*, int, int, int);                    \
  template Status crossentropy_backward<Act>(const Context&, Act*, const Act*, const float*,   \
                                             const int32_t*, const float*, int, int, int);     \
  template Status crossentropy_fused<Act>(const Context&, float*, Act*, const int32_t*, float, \
                                          int, int, int);
PARTRAIN_INSTANTIATE(float)
PARTRAIN_INSTANTIATE(bf16)
#undef PARTRAIN_INSTANTIATE

}  // namespace partrain::engine::cuda
