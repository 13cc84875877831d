// Device-side helpers shared by every kernel file: fp32 <-> Act conversion, warp and block
// reductions, grid sizing. Only .cu files include this.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <library_types.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "engine/cuda/cuda_status.h"
#include "engine/cuda/kernels.h"

namespace partrain::engine::cuda {

// The cuBLAS / cuBLASLt data type of an element type (float or bf16).
template <typename T>
constexpr cudaDataType_t cuda_data_type() {
  if constexpr (std::is_same_v<T, float>) {
    return CUDA_R_32F;
  } else {
    return CUDA_R_16BF;
  }
}

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float x) { return __float2bfloat16_rn(x); }

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ double warp_sum(double x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
template <typename V>
__device__ V block_sum(V x) {
  __shared__ V partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = warp_sum(x);
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = x;
  __syncthreads();
  V total = lane < warps ? partial[lane] : V(0);
  return warp_sum(total);
}

__device__ __forceinline__ float block_max(float x) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = warp_max(x);
  __syncthreads();
  if (lane == 0) partial[warp] = x;
  __syncthreads();
  float m = lane < warps ? partial[lane] : -INFINITY;
  return warp_max(m);
}

// 128-bit access: kVec<T> elements of T in 16 bytes (8 bf16, 4 float), moved with one load
// or store. Callers check aligned16 on the host and keep a scalar path for the rest.
template <typename T>
constexpr int kVec = static_cast<int>(16 / sizeof(T));
template <typename T>
struct alignas(16) Vec {
  T v[kVec<T>];
};
template <typename T>
__device__ __forceinline__ Vec<T> load16(const T* p) {
  Vec<T> r;
  *reinterpret_cast<int4*>(r.v) = *reinterpret_cast<const int4*>(p);
  return r;
}
template <typename T>
__device__ __forceinline__ void store16(T* p, const Vec<T>& x) {
  *reinterpret_cast<int4*>(p) = *reinterpret_cast<const int4*>(x.v);
}
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
// All non-null pointers 16-byte aligned and n a whole number of vectors of T.
template <typename T>
bool vectorizable(size_t n, std::initializer_list<const void*> ptrs) {
  if (n % static_cast<size_t>(kVec<T>) != 0) return false;
  for (const void* p : ptrs) {
    if (p != nullptr && !aligned16(p)) return false;
  }
  return true;
}

inline unsigned grid_for(size_t n, int block) {
  size_t g = (n + static_cast<size_t>(block) - 1) / static_cast<size_t>(block);
  if (g > 0x7fffffffu) g = 0x7fffffffu;
  return static_cast<unsigned>(g > 0 ? g : 1);
}

}  // namespace partrain::engine::cuda

namespace partrain::engine::cuda {

// Fixed-order column sums over N rows: out_k[c] += sum_n f(n, c)[k] for K values per element.
// Pass 1: a (32 columns x R row-chunks) grid writes partials to ctx.scratch; pass 2 adds the
// R partials of each column in chunk order. Deterministic, and wide enough to fill the GPU.
template <int K, typename F>
__global__ void column_partials_kernel(F f, int N, int C, int chunk_rows, float* partial) {
  __shared__ float red[K][8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  const int chunk = blockIdx.y, R = gridDim.y;
  const int begin = chunk * chunk_rows, end = min(N, begin + chunk_rows);
  float acc[K];
#pragma unroll
  for (int k = 0; k < K; ++k) acc[k] = 0.0f;
  if (c < C) {
    for (int n = begin + threadIdx.y; n < end; n += 8) {
      float vals[K];
      f(n, c, vals);
#pragma unroll
      for (int k = 0; k < K; ++k) acc[k] += vals[k];
    }
  }
#pragma unroll
  for (int k = 0; k < K; ++k) red[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      float s = 0.0f;
      for (int y = 0; y < 8; ++y) s += red[k][y][threadIdx.x];
      partial[(static_cast<size_t>(k) * R + chunk) * C + c] = s;
    }
  }
}

template <int K>
struct ColumnOutputs {
  float* out[K];
};

template <int K>
__global__ void column_finish_kernel(ColumnOutputs<K> outs, const float* partial, int R, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (outs.out[k] == nullptr) continue;
    float s = 0.0f;
    for (int r = 0; r < R; ++r) s += partial[(static_cast<size_t>(k) * R + r) * C + c];
    outs.out[k][c] += s;
  }
}

template <int K, typename F>
Status column_sums(const Context& ctx, F f, int N, int C, ColumnOutputs<K> outs) {
  if (N <= 0 || C <= 0) return Status::ok();
  const size_t per_chunk = static_cast<size_t>(K) * C * sizeof(float);
  int R = static_cast<int>(ctx.scratch_bytes / per_chunk);
  if (R < 1) return Status::internal("column_sums: reduction scratch too small for C=" + std::to_string(C));
  R = min(R, 64);
  R = min(R, (N + 63) / 64);  // at least 64 rows per chunk
  R = max(R, 1);
  const int chunk_rows = (N + R - 1) / R;
  R = (N + chunk_rows - 1) / chunk_rows;
  dim3 grid((C + 31) / 32, R), block(32, 8);
  column_partials_kernel<K><<<grid, block, 0, ctx.stream>>>(f, N, C, chunk_rows, ctx.scratch);
  PARTRAIN_RETURN_IF_ERROR(launch_status("column_partials"));
  column_finish_kernel<K><<<(C + 255) / 256, 256, 0, ctx.stream>>>(outs, ctx.scratch, R, C);
  return launch_status("column_finish");
}

}  // namespace partrain::engine::cuda
