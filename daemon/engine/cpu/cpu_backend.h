// The CPU backend: fp32 storage for everything, ops are the reference kernels of
// kernels.h (OpenBLAS GEMMs, OpenMP loops). Memory is 64-byte aligned host memory.
#pragma once

#include <memory>
#include <string>

#include "engine/backend.h"

namespace partrain::engine::cpu {

class CpuBackend : public Backend {
 public:
  CpuBackend() = default;
  ~CpuBackend() override;

  std::string name() const override { return "cpu"; }
  bool host_readable(const Tensor& t) const override { return t.dtype == DType::kF32; }
  DType param_dtype() const override { return DType::kF32; }
  DType grad_dtype() const override { return DType::kF32; }
  DType act_dtype() const override { return DType::kF32; }

  void to_device(const Tensor& dst, const float* src) override;
  void to_device_i32(const Tensor& dst, const int32_t* src) override;
  void to_host(float* dst, const Tensor& src) override;
  void to_host_i32(int32_t* dst, const Tensor& src) override;
  void copy(const Tensor& dst, const Tensor& src) override;
  void synchronize() override {}

  void zero(const Tensor& t) override;
  void fill(const Tensor& t, float value) override;
  void scale(const Tensor& t, float factor) override;
  void accumulate(const Tensor& dst, const Tensor& src) override;
  void residual_forward(const Tensor& out, const Tensor& a, const Tensor& b) override;

  void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                         const Tensor& wpe, int B, int T, int C) override;
  void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                          const Tensor& tokens, int B, int T, int C) override;
  void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                         const Tensor& inp, const Tensor& w, const Tensor& b, int N, int C,
                         float eps) override;
  void layernorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& db,
                          const Tensor& dout, const Tensor& inp, const Tensor& w,
                          const Tensor& mean, const Tensor& rstd, int N, int C) override;
  void rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& w,
                       int N, int C, float eps) override;
  void rmsnorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dout,
                        const Tensor& inp, const Tensor& w, const Tensor& rstd, int N,
                        int C) override;
  void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& w, const Tensor& bias,
                      int N, int C, int OC) override;
  void matmul_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias,
                       const Tensor& dout, const Tensor& inp, const Tensor& w, int N, int C,
                       int OC) override;
  void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                         const Tensor& v, const AttentionDims& d) override;
  void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                          const Tensor& dout, const Tensor& out, const Tensor& lse,
                          const Tensor& q, const Tensor& k, const Tensor& v,
                          const AttentionDims& d) override;
  void gelu_forward(const Tensor& out, const Tensor& inp) override;
  void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) override;
  void swiglu_forward(const Tensor& out, const Tensor& inp, int N, int F) override;
  void swiglu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout, int N,
                       int F) override;
  void rope_forward(const Tensor& out, const Tensor& inp, int B, int T, int heads, int hd,
                    int stride, float theta, const SeqPositions& pos) override;
  void rope_backward(const Tensor& dinp, const Tensor& dout, int B, int T, int heads, int hd,
                     int stride, float theta, const SeqPositions& pos) override;
  void attention_block_forward(const Tensor& out, const Tensor& lse, const Tensor& q,
                               const Tensor& k, const Tensor& v, const AttentionBlockDims& d) override;
  void attention_block_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                const Tensor& dout, const Tensor& out, const Tensor& lse,
                                const Tensor& q, const Tensor& k, const Tensor& v,
                                const AttentionBlockDims& d) override;
  void copy_columns(const Tensor& dst, int dst_stride, const Tensor& src, int src_stride, int rows,
                    int cols) override;
  void crossentropy_forward(const Tensor& losses, const Tensor& lse, const Tensor& logits,
                            const Tensor& targets, int N, int V) override;
  void crossentropy_backward(const Tensor& dlogits, const Tensor& logits, const Tensor& lse,
                             const Tensor& targets, const Tensor& dloss, int N, int V) override;
  void dropout_forward(const Tensor& out, const Tensor& inp, float p, uint64_t seed,
                       uint64_t offset) override;
  void dropout_backward(const Tensor& dinp, const Tensor& dout, float p, uint64_t seed,
                        uint64_t offset) override;
  void gather_rows(const Tensor& out, const Tensor& inp, const Tensor& idx, const Tensor& weight,
                   int M, int C) override;
  void scatter_add_rows(const Tensor& out, const Tensor& inp, const Tensor& idx,
                        const Tensor& weight, int M, int C) override;
  void gathered_row_dot(const Tensor& out, const Tensor& a, const Tensor& idx, const Tensor& b,
                        int M, int C) override;
  double sum_squares(const Tensor& x) override;
  void adamw(const Tensor& param, const Tensor& master, const Tensor& m, const Tensor& v,
             const Tensor& grad, const AdamWArgs& a) override;

 protected:
  void* raw_alloc(size_t bytes) override;
  void raw_free(void* p) override;
};

}  // namespace partrain::engine::cpu
