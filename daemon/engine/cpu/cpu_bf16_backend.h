// The CPU backend with bf16 storage: weights and activations kept as bf16 in host memory
// (as the CUDA backend keeps them on the GPU), gradients, master weights and optimizer
// moments fp32, every op computed in fp32 by the reference kernels. What it is for: CI
// without a GPU exercises the dtype plumbing of every strategy (a strategy that reads a bf16
// buffer as float* breaks here, not first on a GPU), and the bf16 rounding of a run.
//
// Each op widens the parts of the bf16 allocations it touches to fp32 copies, runs CpuBackend's kernel on
// those, and narrows them back (round to nearest even). An allocation the op only read comes
// back unchanged (bf16 -> fp32 -> bf16 is exact), so views into one allocation (q, k and v
// of a packed buffer, an op in place) need no care. Slow: it is a test mode, `[job]
// precision = "bf16"` on CPU ranks.
#pragma once

#include <cstdint>
#include <utility>

#include "engine/cpu/cpu_backend.h"

namespace partrain::engine::cpu {

// fp32 -> bf16, rounding to nearest even (NaN stays NaN); bf16 -> fp32 is exact.
using partrain::from_bf16;
using partrain::to_bf16;

class CpuBf16Backend final : public CpuBackend {
 public:
  std::string name() const override { return "cpu (bf16 storage)"; }
  DType param_dtype() const override { return DType::kBF16; }
  DType act_dtype() const override { return DType::kBF16; }

  void to_device(const Tensor& dst, const float* src) override;
  void to_host(float* dst, const Tensor& src) override;
  void copy(const Tensor& dst, const Tensor& src) override;
  void zero(const Tensor& t) override;
  void fill(const Tensor& t, float value) override;
  void scale(const Tensor& t, float factor) override;
  void accumulate(const Tensor& dst, const Tensor& src) override;
  void residual_forward(const Tensor& out, const Tensor& a, const Tensor& b) override;
  void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe, int B, int T, int C) override;
  void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens, int B, int T, int C) override;
  void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp, const Tensor& w, const Tensor& b, int N, int C, float eps) override;
  void layernorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& db, const Tensor& dout, const Tensor& inp, const Tensor& w, const Tensor& mean, const Tensor& rstd, int N, int C) override;
  void rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& w, int N, int C, float eps) override;
  void rmsnorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dout, const Tensor& inp, const Tensor& w, const Tensor& rstd, int N, int C) override;
  void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& w, const Tensor& bias, int N, int C, int OC) override;
  void matmul_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias, const Tensor& dout, const Tensor& inp, const Tensor& w, int N, int C, int OC) override;
  void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionDims& d) override;
  void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionDims& d) override;
  void gelu_forward(const Tensor& out, const Tensor& inp) override;
  void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) override;
  void swiglu_forward(const Tensor& out, const Tensor& inp, int N, int F) override;
  void swiglu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout, int N, int F) override;
  void rope_forward(const Tensor& out, const Tensor& inp, int B, int T, int heads, int hd, int stride, float theta, const SeqPositions& pos) override;
  void rope_backward(const Tensor& dinp, const Tensor& dout, int B, int T, int heads, int hd, int stride, float theta, const SeqPositions& pos) override;
  void attention_block_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionBlockDims& d) override;
  void attention_block_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionBlockDims& d) override;
  void copy_columns(const Tensor& dst, int dst_stride, const Tensor& src, int src_stride, int rows, int cols) override;
  void crossentropy_forward(const Tensor& losses, const Tensor& lse, const Tensor& logits, const Tensor& targets, int N, int V) override;
  void crossentropy_backward(const Tensor& dlogits, const Tensor& logits, const Tensor& lse, const Tensor& targets, const Tensor& dloss, int N, int V) override;
  void dropout_forward(const Tensor& out, const Tensor& inp, float p, uint64_t seed, uint64_t offset) override;
  void dropout_backward(const Tensor& dinp, const Tensor& dout, float p, uint64_t seed, uint64_t offset) override;
  void gather_rows(const Tensor& out, const Tensor& inp, const Tensor& idx, const Tensor& weight, int M, int C) override;
  void scatter_add_rows(const Tensor& out, const Tensor& inp, const Tensor& idx, const Tensor& weight, int M, int C) override;
  void gathered_row_dot(const Tensor& out, const Tensor& a, const Tensor& idx, const Tensor& b, int M, int C) override;
  double sum_squares(const Tensor& x) override;
  // The update on the fp32 master copy; the bf16 weights are its rounding.
  void adamw(const Tensor& param, const Tensor& master, const Tensor& m, const Tensor& v, const Tensor& grad, const AdamWArgs& a) override;

 private:
  friend class F32Scope;
};

}  // namespace partrain::engine::cpu
