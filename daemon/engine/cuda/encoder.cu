// Token + position embedding (GPT-2's encoder; LLaMA passes no position table).
// Forward gathers rows. Backward sums the dout rows of each token into its dwte row in a
// fixed order, so a run is bit-identical to itself (no floating-point atomics): the
// positions are sorted by token (CUB's radix sort, stable, so a token's positions stay in
// order), and one thread per (token run, channel) adds its rows one after the other. dwpe
// is summed over the batch in a fixed order too.
#include <cub/device/device_radix_sort.cuh>

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

__global__ void iota_kernel(int32_t* out, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = static_cast<int32_t>(i);
  }
}

// Thread (i, c): when sorted position i starts a token's run, channel c of that token's
// dwte row gains the run's dout rows in position order.
template <typename Act>
__global__ void embedding_backward_wte_kernel(float* dwte, const Act* dout, const int32_t* sorted_tokens,
                                              const int32_t* sorted_positions, size_t N, int C) {
  const size_t total = N * C;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t first = i / C;
    const int c = static_cast<int>(i % C);
    const int32_t token = sorted_tokens[first];
    if (first > 0 && sorted_tokens[first - 1] == token) continue;  // not the run's start
    float acc = 0.0f;
    for (size_t j = first; j < N && sorted_tokens[j] == token; ++j) {
      acc += to_f32(dout[static_cast<size_t>(sorted_positions[j]) * C + c]);
    }
    dwte[static_cast<size_t>(token) * C + c] += acc;
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
    // The context's scratch: sorted tokens, positions in and out, then CUB's temporary storage.
    int32_t* sorted_tokens = reinterpret_cast<int32_t*>(ctx.scratch);
    int32_t* positions = sorted_tokens + N;
    int32_t* sorted_positions = positions + N;
    const size_t sorted_bytes = (3 * N * sizeof(int32_t) + 255) / 256 * 256;  // CUB's storage 256-aligned
    void* temp = reinterpret_cast<char*>(ctx.scratch) + sorted_bytes;
    size_t temp_bytes = 0;
    PARTRAIN_RETURN_IF_ERROR(cuda_status(
        cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, tokens, sorted_tokens, positions, sorted_positions,
                                        static_cast<int>(N), 0, 32, ctx.stream),
        "embedding_backward(sort size)"));
    const size_t need = sorted_bytes + temp_bytes;
    if (need > ctx.scratch_bytes) {
      return Status::invalid("embedding backward: " + std::to_string(N) + " tokens per micro-batch need " +
                             std::to_string(need >> 20) + " MiB of sort scratch, more than the context's " +
                             std::to_string(ctx.scratch_bytes >> 20) + " MiB; lower micro_batch");
    }
    iota_kernel<<<grid_for(N, 256), 256, 0, ctx.stream>>>(positions, N);
    PARTRAIN_RETURN_IF_ERROR(launch_status("embedding_backward(iota)"));
    PARTRAIN_RETURN_IF_ERROR(cuda_status(
        cub::DeviceRadixSort::SortPairs(temp, temp_bytes, tokens, sorted_tokens, positions, sorted_positions,
                                        static_cast<int>(N), 0, 32, ctx.stream),
        "embedding_backward(sort)"));
    embedding_backward_wte_kernel<<<grid_for(N * C, 256), 256, 0, ctx.stream>>>(dwte, dout, sorted_tokens,
                                                                                 sorted_positions, N, C);
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
