// Pointwise kernels: GELU (tanh approximation, GPT-2), SwiGLU (LLaMA), residual add,
// Philox dropout, and the conversions, fills and row moves the backend needs. All math in
// fp32; backward kernels accumulate into dinp like the CPU reference.
#include "engine/cuda/common.cuh"
#include "engine/philox.h"

namespace partrain::engine::cuda {
namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)

#define PARTRAIN_GRID_STRIDE(i, n)                                                  \
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<size_t>(gridDim.x) * blockDim.x)

template <typename Act>
__global__ void gelu_forward_kernel(Act* out, const Act* inp, size_t n) {
  PARTRAIN_GRID_STRIDE(i, n) {
    const float x = to_f32(inp[i]);
    out[i] = from_f32<Act>(0.5f * x * (1.0f + tanhf(kGeluScale * (x + 0.044715f * x * x * x))));
  }
}

template <typename Act>
__global__ void gelu_backward_kernel(Act* dinp, const Act* inp, const Act* dout, size_t n) {
  PARTRAIN_GRID_STRIDE(i, n) {
    const float x = to_f32(inp[i]);
    const float th = tanhf(kGeluScale * (x + 0.044715f * x * x * x));
    const float grad = 0.5f * (1.0f + th) +
                       0.5f * x * (1.0f - th * th) * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = from_f32<Act>(to_f32(dinp[i]) + grad * to_f32(dout[i]));
  }
}

// The same three with 128-bit loads and stores: element block i of kVec<Act> values.
__device__ __forceinline__ float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + tanhf(kGeluScale * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float gelu_tanh_grad(float x) {
  const float th = tanhf(kGeluScale * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
}

template <typename Act>
__global__ void gelu_forward_vec_kernel(Act* out, const Act* inp, size_t nvec) {
  constexpr int V = kVec<Act>;
  PARTRAIN_GRID_STRIDE(i, nvec) {
    const Vec<Act> x = load16(inp + i * V);
    Vec<Act> y;
#pragma unroll
    for (int j = 0; j < V; ++j) y.v[j] = from_f32<Act>(gelu_tanh(to_f32(x.v[j])));
    store16(out + i * V, y);
  }
}

template <typename Act>
__global__ void gelu_backward_vec_kernel(Act* dinp, const Act* inp, const Act* dout, size_t nvec) {
  constexpr int V = kVec<Act>;
  PARTRAIN_GRID_STRIDE(i, nvec) {
    const Vec<Act> x = load16(inp + i * V), d = load16(dout + i * V);
    Vec<Act> g = load16(dinp + i * V);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      g.v[j] = from_f32<Act>(to_f32(g.v[j]) + gelu_tanh_grad(to_f32(x.v[j])) * to_f32(d.v[j]));
    }
    store16(dinp + i * V, g);
  }
}

template <typename Act>
__global__ void residual_vec_kernel(Act* out, const Act* a, const Act* b, size_t nvec) {
  constexpr int V = kVec<Act>;
  PARTRAIN_GRID_STRIDE(i, nvec) {
    const Vec<Act> x = load16(a + i * V), y = load16(b + i * V);
    Vec<Act> o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.v[j] = from_f32<Act>(to_f32(x.v[j]) + to_f32(y.v[j]));
    store16(out + i * V, o);
  }
}

template <typename Act>
__global__ void swiglu_forward_vec_kernel(Act* out, const Act* inp, int N, int F) {
  constexpr int V = kVec<Act>;
  const size_t per_row = static_cast<size_t>(F) / V, nvec = static_cast<size_t>(N) * per_row;
  PARTRAIN_GRID_STRIDE(i, nvec) {
    const size_t n = i / per_row, f = (i % per_row) * V;
    const Vec<Act> g = load16(inp + n * 2 * F + f), u = load16(inp + n * 2 * F + F + f);
    Vec<Act> o;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float gj = to_f32(g.v[j]);
      o.v[j] = from_f32<Act>(gj / (1.0f + expf(-gj)) * to_f32(u.v[j]));
    }
    store16(out + n * F + f, o);
  }
}

template <typename Act>
__global__ void swiglu_backward_vec_kernel(Act* dinp, const Act* inp, const Act* dout, int N, int F) {
  constexpr int V = kVec<Act>;
  const size_t per_row = static_cast<size_t>(F) / V, nvec = static_cast<size_t>(N) * per_row;
  PARTRAIN_GRID_STRIDE(i, nvec) {
    const size_t n = i / per_row, f = (i % per_row) * V;
    const size_t gi = n * 2 * F + f, ui = gi + F;
    const Vec<Act> g = load16(inp + gi), u = load16(inp + ui), d = load16(dout + n * F + f);
    Vec<Act> dg = load16(dinp + gi), du = load16(dinp + ui);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float gj = to_f32(g.v[j]), uj = to_f32(u.v[j]), dj = to_f32(d.v[j]);
      const float sig = 1.0f / (1.0f + expf(-gj));
      dg.v[j] = from_f32<Act>(to_f32(dg.v[j]) + dj * uj * sig * (1.0f + gj * (1.0f - sig)));
      du.v[j] = from_f32<Act>(to_f32(du.v[j]) + dj * gj * sig);
    }
    store16(dinp + gi, dg);
    store16(dinp + ui, du);
  }
}

template <typename Act>
__global__ void swiglu_forward_kernel(Act* out, const Act* inp, int N, int F) {
  const size_t total = static_cast<size_t>(N) * F;
  PARTRAIN_GRID_STRIDE(i, total) {
    const size_t n = i / F, f = i % F;
    const float g = to_f32(inp[n * 2 * F + f]), u = to_f32(inp[n * 2 * F + F + f]);
    out[i] = from_f32<Act>(g / (1.0f + expf(-g)) * u);
  }
}

template <typename Act>
__global__ void swiglu_backward_kernel(Act* dinp, const Act* inp, const Act* dout, int N, int F) {
  const size_t total = static_cast<size_t>(N) * F;
  PARTRAIN_GRID_STRIDE(i, total) {
    const size_t n = i / F, f = i % F;
    const size_t gi = n * 2 * F + f, ui = gi + F;
    const float g = to_f32(inp[gi]), u = to_f32(inp[ui]), d = to_f32(dout[i]);
    const float sig = 1.0f / (1.0f + expf(-g));
    dinp[gi] = from_f32<Act>(to_f32(dinp[gi]) + d * u * sig * (1.0f + g * (1.0f - sig)));
    dinp[ui] = from_f32<Act>(to_f32(dinp[ui]) + d * g * sig);
  }
}

template <typename Act>
__global__ void residual_kernel(Act* out, const Act* a, const Act* b, size_t n) {
  PARTRAIN_GRID_STRIDE(i, n) { out[i] = from_f32<Act>(to_f32(a[i]) + to_f32(b[i])); }
}

template <typename Act, bool kAccumulate>
__global__ void dropout_kernel(Act* out, const Act* inp, size_t n, float p, uint64_t seed,
                               uint64_t offset) {
  const float keep_scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  PARTRAIN_GRID_STRIDE(i, n) {
    const float y = philox_uniform(seed, offset + i) >= p ? to_f32(inp[i]) * keep_scale : 0.0f;
    out[i] = from_f32<Act>(kAccumulate ? to_f32(out[i]) + y : y);
  }
}

template <typename Src, typename Dst, bool kAccumulate>
__global__ void convert_kernel(Dst* out, const Src* inp, size_t n) {
  PARTRAIN_GRID_STRIDE(i, n) {
    const float x = to_f32(inp[i]);
    out[i] = from_f32<Dst>(kAccumulate ? to_f32(out[i]) + x : x);
  }
}

template <typename T>
__global__ void scale_kernel(T* x, float s, size_t n) {
  PARTRAIN_GRID_STRIDE(i, n) { x[i] = from_f32<T>(to_f32(x[i]) * s); }
}

template <typename T>
__global__ void fill_kernel(T* x, float value, size_t n) {
  const T v = from_f32<T>(value);
  PARTRAIN_GRID_STRIDE(i, n) { x[i] = v; }
}

template <typename T>
__global__ void add_columns_kernel(T* dst, int dst_stride, const T* src, int src_stride, int rows, int cols) {
  const size_t total = static_cast<size_t>(rows) * cols;
  PARTRAIN_GRID_STRIDE(i, total) {
    const size_t r = i / cols, c = i % cols;
    T* d = dst + r * dst_stride + c;
    *d = from_f32<T>(to_f32(*d) + to_f32(src[r * src_stride + c]));
  }
}

template <typename Act>
__global__ void gather_rows_kernel(Act* out, const Act* inp, const int32_t* idx,
                                   const float* weight, int M, int C) {
  const size_t total = static_cast<size_t>(M) * C;
  PARTRAIN_GRID_STRIDE(i, total) {
    const size_t m = i / C, c = i % C;
    const float w = weight != nullptr ? weight[m] : 1.0f;
    out[i] = from_f32<Act>(w * to_f32(inp[static_cast<size_t>(idx[m]) * C + c]));
  }
}

template <typename Act>
__global__ void scatter_add_rows_kernel(Act* out, const Act* inp, const int32_t* idx,
                                        const float* weight, int M, int C) {
  const size_t total = static_cast<size_t>(M) * C;
  PARTRAIN_GRID_STRIDE(i, total) {
    const size_t m = i / C, c = i % C;
    const float w = weight != nullptr ? weight[m] : 1.0f;
    Act* o = out + static_cast<size_t>(idx[m]) * C + c;
    *o = from_f32<Act>(to_f32(*o) + w * to_f32(inp[i]));
  }
}

template <typename Act>
__global__ void gathered_row_dot_kernel(float* out, const Act* a, const int32_t* idx,
                                        const Act* b, int M, int C) {
  const int m = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (m >= M) return;
  const Act* ar = a + static_cast<size_t>(idx[m]) * C;
  const Act* br = b + static_cast<size_t>(m) * C;
  double acc = 0.0;
  for (int c = lane; c < C; c += 32) acc += static_cast<double>(to_f32(ar[c])) * to_f32(br[c]);
  acc = warp_sum(acc);
  if (lane == 0) out[m] = static_cast<float>(acc);
}

#undef PARTRAIN_GRID_STRIDE

}  // namespace

template <typename Act>
Status gelu_forward(const Context& ctx, Act* out, const Act* inp, size_t n) {
  if (ctx.opt.vector_io && vectorizable<Act>(n, {out, inp})) {
    const size_t nv = n / kVec<Act>;
    gelu_forward_vec_kernel<<<grid_for(nv, 256), 256, 0, ctx.stream>>>(out, inp, nv);
    return launch_status("gelu_forward");
  }
  gelu_forward_kernel<<<grid_for(n, 256), 256, 0, ctx.stream>>>(out, inp, n);
  return launch_status("gelu_forward");
}
template <typename Act>
Status gelu_backward(const Context& ctx, Act* dinp, const Act* inp, const Act* dout, size_t n) {
  if (ctx.opt.vector_io && vectorizable<Act>(n, {dinp, inp, dout})) {
    const size_t nv = n / kVec<Act>;
    gelu_backward_vec_kernel<<<grid_for(nv, 256), 256, 0, ctx.stream>>>(dinp, inp, dout, nv);
    return launch_status("gelu_backward");
  }
  gelu_backward_kernel<<<grid_for(n, 256), 256, 0, ctx.stream>>>(dinp, inp, dout, n);
  return launch_status("gelu_backward");
}
template <typename Act>
Status swiglu_forward(const Context& ctx, Act* out, const Act* inp, int N, int F) {
  if (ctx.opt.vector_io && vectorizable<Act>(static_cast<size_t>(F), {out, inp})) {
    const size_t nv = static_cast<size_t>(N) * F / kVec<Act>;
    swiglu_forward_vec_kernel<<<grid_for(nv, 256), 256, 0, ctx.stream>>>(out, inp, N, F);
    return launch_status("swiglu_forward");
  }
  swiglu_forward_kernel<<<grid_for(static_cast<size_t>(N) * F, 256), 256, 0, ctx.stream>>>(
      out, inp, N, F);
  return launch_status("swiglu_forward");
}
template <typename Act>
Status swiglu_backward(const Context& ctx, Act* dinp, const Act* inp, const Act* dout, int N,
                       int F) {
  if (ctx.opt.vector_io && vectorizable<Act>(static_cast<size_t>(F), {dinp, inp, dout})) {
    const size_t nv = static_cast<size_t>(N) * F / kVec<Act>;
    swiglu_backward_vec_kernel<<<grid_for(nv, 256), 256, 0, ctx.stream>>>(dinp, inp, dout, N, F);
    return launch_status("swiglu_backward");
  }
  swiglu_backward_kernel<<<grid_for(static_cast<size_t>(N) * F, 256), 256, 0, ctx.stream>>>(
      dinp, inp, dout, N, F);
  return launch_status("swiglu_backward");
}
template <typename Act>
Status residual_forward(const Context& ctx, Act* out, const Act* a, const Act* b, size_t n) {
  if (ctx.opt.vector_io && vectorizable<Act>(n, {out, a, b})) {
    const size_t nv = n / kVec<Act>;
    residual_vec_kernel<<<grid_for(nv, 256), 256, 0, ctx.stream>>>(out, a, b, nv);
    return launch_status("residual_forward");
  }
  residual_kernel<<<grid_for(n, 256), 256, 0, ctx.stream>>>(out, a, b, n);
  return launch_status("residual_forward");
}
template <typename Act>
Status dropout_forward(const Context& ctx, Act* out, const Act* inp, size_t n, float p,
                       uint64_t seed, uint64_t offset) {
  dropout_kernel<Act, false><<<grid_for(n, 256), 256, 0, ctx.stream>>>(out, inp, n, p, seed, offset);
  return launch_status("dropout_forward");
}
template <typename Act>
Status dropout_backward(const Context& ctx, Act* dinp, const Act* dout, size_t n, float p,
                        uint64_t seed, uint64_t offset) {
  dropout_kernel<Act, true><<<grid_for(n, 256), 256, 0, ctx.stream>>>(dinp, dout, n, p, seed,
                                                                       offset);
  return launch_status("dropout_backward");
}
template <typename Src, typename Dst>
Status convert(const Context& ctx, Dst* out, const Src* inp, size_t n) {
  convert_kernel<Src, Dst, false><<<grid_for(n, 256), 256, 0, ctx.stream>>>(out, inp, n);
  return launch_status("convert");
}
template <typename Src, typename Dst>
Status accumulate(const Context& ctx, Dst* out, const Src* inp, size_t n) {
  convert_kernel<Src, Dst, true><<<grid_for(n, 256), 256, 0, ctx.stream>>>(out, inp, n);
  return launch_status("accumulate");
}
template <typename T>
Status scale(const Context& ctx, T* x, float s, size_t n) {
  scale_kernel<<<grid_for(n, 256), 256, 0, ctx.stream>>>(x, s, n);
  return launch_status("scale");
}
template <typename T>
Status fill(const Context& ctx, T* x, float value, size_t n) {
  fill_kernel<<<grid_for(n, 256), 256, 0, ctx.stream>>>(x, value, n);
  return launch_status("fill");
}
template <typename T>
Status add_columns(const Context& ctx, T* dst, int dst_stride, const T* src, int src_stride, int rows, int cols) {
  if (rows <= 0 || cols <= 0) return Status::ok();
  add_columns_kernel<<<grid_for(static_cast<size_t>(rows) * cols, 256), 256, 0, ctx.stream>>>(
      dst, dst_stride, src, src_stride, rows, cols);
  return launch_status("add_columns");
}
template <typename Act>
Status gather_rows(const Context& ctx, Act* out, const Act* inp, const int32_t* idx,
                   const float* weight, int M, int C) {
  gather_rows_kernel<<<grid_for(static_cast<size_t>(M) * C, 256), 256, 0, ctx.stream>>>(
      out, inp, idx, weight, M, C);
  return launch_status("gather_rows");
}
template <typename Act>
Status scatter_add_rows(const Context& ctx, Act* out, const Act* inp, const int32_t* idx,
                        const float* weight, int M, int C) {
  scatter_add_rows_kernel<<<grid_for(static_cast<size_t>(M) * C, 256), 256, 0, ctx.stream>>>(
      out, inp, idx, weight, M, C);
  return launch_status("scatter_add_rows");
}
template <typename Act>
Status gathered_row_dot(const Context& ctx, float* out, const Act* a, const int32_t* idx,
                        const Act* b, int M, int C) {
  gathered_row_dot_kernel<<<grid_for(static_cast<size_t>(M), 8), 256, 0, ctx.stream>>>(
      out, a, idx, b, M, C);
  return launch_status("gathered_row_dot");
}

#define PARTRAIN_INSTANTIATE(Act)                                                              \
  template Status gelu_forward<Act>(const Context&, Act*, const Act*, size_t);                 \
  template Status gelu_backward<Act>(const Context&, Act*, const Act*, const Act*, size_t);    \
  template Status swiglu_forward<Act>(const Context&, Act*, const Act*, int, int);             \
  template Status swiglu_backward<Act>(const Context&, Act*, const Act*, const Act*, int, int); \
  template Status residual_forward<Act>(const Context&, Act*, const Act*, const Act*, size_t); \
  template Status dropout_forward<Act>(const Context&, Act*, const Act*, size_t, float,        \
                                       uint64_t, uint64_t);                                    \
  template Status dropout_backward<Act>(const Context&, Act*, const Act*, size_t, float,       \
                                        uint64_t, uint64_t);                                   \
  template Status scale<Act>(const Context&, Act*, float, size_t);                             \
  template Status fill<Act>(const Context&, Act*, float, size_t);                              \
  template Status add_columns<Act>(const Context&, Act*, int, const Act*, int, int, int);      \
  template Status gather_rows<Act>(const Context&, Act*, const Act*, const int32_t*,           \
                                   const float*, int, int);                                    \
  template Status scatter_add_rows<Act>(const Context&, Act*, const Act*, const int32_t*,      \
                                        const float*, int, int);                               \
  template Status gathered_row_dot<Act>(const Context&, float*, const Act*, const int32_t*,    \
                                        const Act*, int, int);
PARTRAIN_INSTANTIATE(float)
PARTRAIN_INSTANTIATE(bf16)
#undef PARTRAIN_INSTANTIATE

#define PARTRAIN_INSTANTIATE_CONVERT(Src, Dst)                                      \
  template Status convert<Src, Dst>(const Context&, Dst*, const Src*, size_t);      \
  template Status accumulate<Src, Dst>(const Context&, Dst*, const Src*, size_t);
PARTRAIN_INSTANTIATE_CONVERT(float, float)
PARTRAIN_INSTANTIATE_CONVERT(float, bf16)
PARTRAIN_INSTANTIATE_CONVERT(bf16, float)
PARTRAIN_INSTANTIATE_CONVERT(bf16, bf16)
#undef PARTRAIN_INSTANTIATE_CONVERT

}  // namespace partrain::engine::cuda
