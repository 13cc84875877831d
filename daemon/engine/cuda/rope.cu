// Rotary position embedding, Hugging Face rotate_half convention: the pair
// (x_i, x_{i+hd/2}) at position t turns by t * theta^(-2i/hd). Frequencies and angles in
// fp32 as Hugging Face forms them, cos/sin from double (as the CPU reference), so both
// devices rotate by the same angles. Backward turns by the opposite angle and WRITES dinp.
// Row t of a sequence is at position pos.at(t) (cp chunks; t itself by default).
#include "engine/cuda/common.cuh"

namespace partrain::engine::cuda {
namespace {

template <typename Act>
__global__ void rope_kernel(Act* out, const Act* inp, int B, int T, int heads, int hd, int stride,
                            float theta, float sign, SeqPositions pos) {
  const int half = hd / 2;
  const size_t total = static_cast<size_t>(B) * T * heads * half;
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(idx % half);
    size_t r = idx / half;
    const int h = static_cast<int>(r % heads);
    const size_t bt = r / heads;
    const int t = pos.at(static_cast<int>(bt % T));  // row -> position (cp chunks)
    // powf through double: the correctly rounded value glibc's powf gives the CPU reference.
    const float expo = static_cast<float>(2 * i) / static_cast<float>(hd);
    const float inv_freq =
        1.0f / static_cast<float>(pow(static_cast<double>(theta), static_cast<double>(expo)));
    const float angle = static_cast<float>(t) * inv_freq;
    const float c = static_cast<float>(cos(static_cast<double>(angle)));
    const float s = sign * static_cast<float>(sin(static_cast<double>(angle)));
    const size_t base = bt * stride + static_cast<size_t>(h) * hd;
    const float x1 = to_f32(inp[base + i]), x2 = to_f32(inp[base + i + half]);
    out[base + i] = from_f32<Act>(x1 * c - x2 * s);
    out[base + i + half] = from_f32<Act>(x2 * c + x1 * s);
  }
}

}  // namespace

template <typename Act>
Status rope_forward(const Context& ctx, Act* out, const Act* inp, int B, int T, int heads, int hd,
                    int stride, float theta, const SeqPositions& pos) {
  if (hd % 2 != 0) return Status::invalid("rope: head dim must be even, got " + std::to_string(hd));
  const size_t n = static_cast<size_t>(B) * T * heads * (hd / 2);
  rope_kernel<<<grid_for(n, 256), 256, 0, ctx.stream>>>(out, inp, B, T, heads, hd, stride, theta,
                                                         1.0f, pos);
  return launch_status("rope_forward");
}

template <typename Act>
Status rope_backward(const Context& ctx, Act* dinp, const Act* dout, int B, int T, int heads,
                     int hd, int stride, float theta, const SeqPositions& pos) {
  if (hd % 2 != 0) return Status::invalid("rope: head dim must be even, got " + std::to_string(hd));
  const size_t n = static_cast<size_t>(B) * T * heads * (hd / 2);
  rope_kernel<<<grid_for(n, 256), 256, 0, ctx.stream>>>(dinp, dout, B, T, heads, hd, stride, theta,
                                                         -1.0f, pos);
  return launch_status("rope_backward");
}

#define PARTRAIN_INSTANTIATE(Act)                                                              \
  template Status rope_forward<Act>(const Context&, Act*, const Act*, int, int, int, int, int, \
                                    float, const SeqPositions&);                               \
  template Status rope_backward<Act>(const Context&, Act*, const Act*, int, int, int, int, int, \
                                     float, const SeqPositions&);
PARTRAIN_INSTANTIATE(float)
PARTRAIN_INSTANTIATE(bf16)
#undef PARTRAIN_INSTANTIATE

}  // namespace partrain::engine::cuda
