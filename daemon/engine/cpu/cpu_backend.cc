// CpuBackend: forwards each op to the reference kernels (kernels.h, rows.h).
#include "engine/cpu/cpu_backend.h"

#include <cstdlib>
#include <cstring>

#include "engine/cpu/kernels.h"
#include "engine/cpu/rows.h"

namespace partrain::engine::cpu {
namespace {

float* f(const Tensor& t) { return t.ptr<float>(); }  // null for an empty tensor
int32_t* i32(const Tensor& t) { return t.ptr<int32_t>(); }
size_t n_of(const Tensor& t) { return static_cast<size_t>(t.numel()); }

}  // namespace

CpuBackend::~CpuBackend() { release_all(); }

void* CpuBackend::raw_alloc(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p != nullptr) std::memset(p, 0, rounded);
  return p;
}
void CpuBackend::raw_free(void* p) { std::free(p); }

void CpuBackend::to_device(const Tensor& dst, const float* src) {
  std::memcpy(dst.data, src, dst.bytes());
}
void CpuBackend::to_device_i32(const Tensor& dst, const int32_t* src) {
  std::memcpy(dst.data, src, dst.bytes());
}
void CpuBackend::to_host(float* dst, const Tensor& src) { std::memcpy(dst, src.data, src.bytes()); }
void CpuBackend::to_host_i32(int32_t* dst, const Tensor& src) {
  std::memcpy(dst, src.data, src.bytes());
}
void CpuBackend::copy(const Tensor& dst, const Tensor& src) {
  std::memcpy(dst.data, src.data, src.bytes());
}

void CpuBackend::zero(const Tensor& t) { std::memset(t.data, 0, t.bytes()); }
void CpuBackend::fill(const Tensor& t, float value) {
  float* p = f(t);
  const size_t n = n_of(t);
  for (size_t i = 0; i < n; ++i) p[i] = value;
}
void CpuBackend::scale(const Tensor& t, float factor) {
  float* p = f(t);
  const size_t n = n_of(t);
#pragma omp parallel for simd
  for (size_t i = 0; i < n; ++i) p[i] *= factor;
}
void CpuBackend::accumulate(const Tensor& dst, const Tensor& src) {
  float* d = f(dst);
  const float* s = f(src);
  const size_t n = n_of(dst);
#pragma omp parallel for simd
  for (size_t i = 0; i < n; ++i) d[i] += s[i];
}
void CpuBackend::residual_forward(const Tensor& out, const Tensor& a, const Tensor& b) {
  cpu::residual_forward(f(out), f(a), f(b), n_of(out));
}

void CpuBackend::embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                                   const Tensor& wpe, int B, int T, int C) {
  cpu::embedding_forward(f(out), i32(tokens), f(wte), f(wpe), B, T, C);
}
void CpuBackend::embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                                    const Tensor& tokens, int B, int T, int C) {
  cpu::embedding_backward(f(dwte), f(dwpe), f(dout), i32(tokens), B, T, C);
}
void CpuBackend::layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& inp, const Tensor& w, const Tensor& b, int N,
                                   int C, float eps) {
  cpu::layernorm_forward(f(out), f(mean), f(rstd), f(inp), f(w), f(b), N, C, eps);
}
void CpuBackend::layernorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& db,
                                    const Tensor& dout, const Tensor& inp, const Tensor& w,
                                    const Tensor& mean, const Tensor& rstd, int N, int C) {
  cpu::layernorm_backward(f(dinp), f(dw), f(db), f(dout), f(inp), f(w), f(mean), f(rstd), N, C);
}
void CpuBackend::rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp,
                                 const Tensor& w, int N, int C, float eps) {
  cpu::rmsnorm_forward(f(out), f(rstd), f(inp), f(w), N, C, eps);
}
void CpuBackend::rmsnorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dout,
                                  const Tensor& inp, const Tensor& w, const Tensor& rstd, int N,
                                  int C) {
  cpu::rmsnorm_backward(f(dinp), f(dw), f(dout), f(inp), f(w), f(rstd), N, C);
}
void CpuBackend::matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& w,
                                const Tensor& bias, int N, int C, int OC) {
  cpu::matmul_forward(f(out), f(inp), f(w), f(bias), N, C, OC);
}
void CpuBackend::matmul_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias,
                                 const Tensor& dout, const Tensor& inp, const Tensor& w, int N,
                                 int C, int OC) {
  cpu::matmul_backward(f(dinp), f(dw), f(dbias), f(dout), f(inp), f(w), N, C, OC);
}
void CpuBackend::attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q,
                                   const Tensor& k, const Tensor& v, const AttentionDims& d) {
  cpu::attention_forward(f(out), f(lse), f(q), f(k), f(v), d.B, d.T, d.H, d.KV, d.hd, d.q_stride,
                         d.kv_stride);
}
void CpuBackend::attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                    const Tensor& dout, const Tensor& out, const Tensor& lse,
                                    const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionDims& d) {
  cpu::attention_backward(f(dq), f(dk), f(dv), f(dout), f(out), f(lse), f(q), f(k), f(v), d.B,
                          d.T, d.H, d.KV, d.hd, d.q_stride, d.kv_stride);
}
void CpuBackend::gelu_forward(const Tensor& out, const Tensor& inp) {
  cpu::gelu_forward(f(out), f(inp), n_of(out));
}
void CpuBackend::gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  cpu::gelu_backward(f(dinp), f(inp), f(dout), n_of(dinp));
}
void CpuBackend::swiglu_forward(const Tensor& out, const Tensor& inp, int N, int F) {
  cpu::swiglu_forward(f(out), f(inp), N, F);
}
void CpuBackend::swiglu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout, int N,
                                 int F) {
  cpu::swiglu_backward(f(dinp), f(inp), f(dout), N, F);
}
void CpuBackend::rope_forward(const Tensor& out, const Tensor& inp, int B, int T, int heads,
                              int hd, int stride, float theta, const SeqPositions& pos) {
  cpu::rope_forward(f(out), f(inp), B, T, heads, hd, stride, theta, pos);
}
void CpuBackend::rope_backward(const Tensor& dinp, const Tensor& dout, int B, int T, int heads,
                               int hd, int stride, float theta, const SeqPositions& pos) {
  cpu::rope_backward(f(dinp), f(dout), B, T, heads, hd, stride, theta, pos);
}
namespace {
AttentionBlockShape block_shape(const AttentionBlockDims& d) {
  return {d.B, d.Tq, d.Tk, d.H, d.KV, d.hd, d.q_stride, d.kv_stride, d.q_pos, d.k_pos};
}
}  // namespace
void CpuBackend::attention_block_forward(const Tensor& out, const Tensor& lse, const Tensor& q,
                                         const Tensor& k, const Tensor& v, const AttentionBlockDims& d) {
  cpu::attention_block_forward(f(out), f(lse), f(q), f(k), f(v), block_shape(d));
}
void CpuBackend::attention_block_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                          const Tensor& dout, const Tensor& out, const Tensor& lse,
                                          const Tensor& q, const Tensor& k, const Tensor& v,
                                          const AttentionBlockDims& d) {
  cpu::attention_block_backward(f(dq), f(dk), f(dv), f(dout), f(out), f(lse), f(q), f(k), f(v),
                                block_shape(d));
}
void CpuBackend::copy_columns(const Tensor& dst, int dst_stride, const Tensor& src, int src_stride,
                              int rows, int cols) {
  cpu::copy_columns(f(dst), dst_stride, f(src), src_stride, rows, cols);
}
void CpuBackend::crossentropy_forward(const Tensor& losses, const Tensor& lse,
                                      const Tensor& logits, const Tensor& targets, int N, int V) {
  cpu::crossentropy_forward(f(losses), f(lse), f(logits), i32(targets), N, V);
}
void CpuBackend::crossentropy_backward(const Tensor& dlogits, const Tensor& logits,
                                       const Tensor& lse, const Tensor& targets,
                                       const Tensor& dloss, int N, int V) {
  cpu::crossentropy_backward(f(dlogits), f(logits), f(lse), i32(targets), f(dloss), N, V);
}
void CpuBackend::dropout_forward(const Tensor& out, const Tensor& inp, float p, uint64_t seed,
                                 uint64_t offset) {
  cpu::dropout_forward(f(out), f(inp), n_of(out), p, seed, offset);
}
void CpuBackend::dropout_backward(const Tensor& dinp, const Tensor& dout, float p, uint64_t seed,
                                  uint64_t offset) {
  cpu::dropout_backward(f(dinp), f(dout), n_of(dinp), p, seed, offset);
}
void CpuBackend::gather_rows(const Tensor& out, const Tensor& inp, const Tensor& idx,
                             const Tensor& weight, int M, int C) {
  cpu::gather_rows(f(out), f(inp), i32(idx), f(weight), M, C);
}
void CpuBackend::scatter_add_rows(const Tensor& out, const Tensor& inp, const Tensor& idx,
                                  const Tensor& weight, int M, int C) {
  cpu::scatter_add_rows(f(out), f(inp), i32(idx), f(weight), M, C);
}
void CpuBackend::gathered_row_dot(const Tensor& out, const Tensor& a, const Tensor& idx,
                                  const Tensor& b, int M, int C) {
  cpu::gathered_row_dot(f(out), f(a), i32(idx), f(b), M, C);
}
double CpuBackend::sum_squares(const Tensor& x) { return cpu::sum_squares(f(x), n_of(x)); }
void CpuBackend::adamw(const Tensor& param, const Tensor& /*master*/, const Tensor& m,
                       const Tensor& v, const Tensor& grad, const AdamWArgs& a) {
  cpu::adamw_update(f(param), f(m), f(v), f(grad), n_of(param), a.lr, a.beta1, a.beta2, a.eps,
                    a.weight_decay, a.t, a.grad_scale);
}

}  // namespace partrain::engine::cpu

namespace partrain::engine {
std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<cpu::CpuBackend>(); }
}  // namespace partrain::engine
