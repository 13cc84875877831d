// Token + position embedding (GPT-2's encoder; LLaMA passes no position table).
// Forward gathers rows; backward scatters dout rows into dwte with fp32 atomics (tokens
// repeat, so rows collide) and sums dwpe over the batch in a fixed order.
#include "engine/cuda/common.cuh"

namespace partrain::engine::cuda {
namespace {

template <typename Act>
__global__ void embedding_forward_kernel(Act* out, const int32_t* tokens, const Act* wte,
                                         const Act* wpe, int B, int T, int C) {
  const size_t total = static_cast<size_t>(B) * T * C;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t n = i / C;
    const int c = static_cast<int>(i % C);
    const int t = static_cast<int>(n % T);
    float x = to_f32(wte[static_cast<size_t>(tokens[n]) * C + c]);
    if (wpe != nullptr) x += to_f32(wpe[static_cast<size_t>(t) * C + c]);
    out[i] = from_f32<Act>(x);
  }
}

template <typename Act>
__global__ void embedding_backward_wte_kernel(float* dwte, const Act* dout, const int32_t* tokens,
                                              size_t N, int C) {
  const size_t total = N * C;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t n = i / C;
    const int c = static_cast<int>(i % C);
    atomicAdd(&dwte[static_cast<size_t>(tokens[n]) * C + c], to_f32(dout[i]));
  }
}

template <typename Act>
__global__ void embedding_backward_wpe_kernel(float* dwpe, const Act* dout, int B, int T, int C) {
  const size_t total = static_cast<size_t>(T) * C;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float acc = 0.0f;
    for (int b = 0; b < B; ++b) acc += to_f32(dout[static_cast<size_t>(b) * T * C + i]);
    dwpe[i] += acc;
  }
}

}  // namespace

template <typename Act>
Status embedding_forward(const Context& ctx, Act* out, const int32_t* tokens, const Act* wte,
                         const Act* wpe, int B, int T, int C) {
  const size_t n = static_cast<size_t>(B) * T * C;
  embedding_forward_kernel<<<grid_for(n, 256), 256, 0, ctx.stream>>>(out, tokens, wte, wpe, B, T,
                                                                        C);
  return launch_status("embedding_forward");
}

template <typename Act>
Status embedding_backward(const Context& ctx, float* dwte, float* dwpe, const Act* dout,
                          const int32_t* tokens, int B, int T, int C) {
  const size_t N = static_cast<size_t>(B) * T;
  if (dwte != nullptr) {
    embedding_backward_wte_kernel<<<grid_for(N * C, 256), 256, 0, ctx.stream>>>(dwte, dout,
                                                                                 tokens, N, C);
    PARTRAIN_RETURN_IF_ERROR(launch_status("embedding_backward(wte)"));
  }
  if (dwpe != nullptr) {
    const size_t n = static_cast<size_t>(T) * C;
    embedding_backward_wpe_kernel<<<grid_for(n, 256), 256, 0, ctx.stream>>>(dwpe, dout, B, T, C);
    PARTRAIN_RETURN_IF_ERROR(launch_status("embedding_backward(wpe)"));
  }
  return Status::ok();
}

#define PARTRAIN_INSTANTIATE(Act)                                                              \
  template Status embedding_forward<Act>(const Context&, Act*, const int32_t*, const Act*,     \
                                         const Act*, int, int, int);                           \
  template Status embedding_backward<Act>(const Context&, float*, float*, const Act*,          \
                                          const int32_t*, int, int, int);
PARTRAIN_INSTANTIATE(float)
PARTRAIN_INSTANTIATE(bf16)
#undef PARTRAIN_INSTANTIATE

}  // namespace partrain::engine::cuda
