// The emulated GPU's backend: engine::Backend as the CUDA backend presents it (bf16 or fp32
// weights and activations, fp32 gradients, fp32 master weights inside adamw), computed by the
// CPU backend's kernels on the host backing of device memory (device_arena.h).
//
// Every op first applies the CUDA backend's dtype rules (engine/cuda/cuda_backend.cc: one
// activation dtype per op, fp32 statistics and weight gradients, i32 tokens and indices) and
// translates each tensor's device range to its backing, refusing a host pointer, a range that
// leaves its allocation and a view in another dtype than its allocation's. As on CUDA, the
// first error is kept, every later op is skipped, and status() reports it; so a strategy that
// passes here differs on a GPU only in kernels, streams and NCCL.
//
// bf16 storage is the CPU bf16 backend's (engine/cpu/cpu_bf16_backend.h): bf16 in memory,
// fp32 arithmetic, rounded to nearest even, as the CUDA backend stores it.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <utility>

#include "engine/backend.h"

namespace partrain::gpu::emu {

using engine::AdamWArgs;
using engine::AttentionBlockDims;
using engine::AttentionDims;
using engine::SeqPositions;
using engine::Tensor;

class EmuBackend final : public engine::Backend {
 public:
  // The emulated cuda:`ordinal` with `storage` (kBF16 or kF32) weights and activations.
  EmuBackend(int ordinal, DType storage);
  ~EmuBackend() override;

  std::string name() const override { return "cuda:" + std::to_string(ordinal_) + " (emulated)"; }
  DType param_dtype() const override { return storage_; }
  DType grad_dtype() const override { return DType::kF32; }
  DType act_dtype() const override { return storage_; }
  Status status() override { return error_; }

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
  void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe, int B, int T,
                         int C) override;
  void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens, int B,
                          int T, int C) override;
  void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                         const Tensor& w, const Tensor& b, int N, int C, float eps) override;
  void layernorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& db, const Tensor& dout,
                          const Tensor& inp, const Tensor& w, const Tensor& mean, const Tensor& rstd, int N,
                          int C) override;
  void rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& w, int N, int C,
                       float eps) override;
  void rmsnorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dout, const Tensor& inp,
                        const Tensor& w, const Tensor& rstd, int N, int C) override;
  void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& w, const Tensor& bias, int N, int C,
                      int OC) override;
  void matmul_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias, const Tensor& dout,
                       const Tensor& inp, const Tensor& w, int N, int C, int OC) override;
  void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                         const AttentionDims& d) override;
  void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                          const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                          const AttentionDims& d) override;
  void gelu_forward(const Tensor& out, const Tensor& inp) override;
  void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) override;
  void swiglu_forward(const Tensor& out, const Tensor& inp, int N, int F) override;
  void swiglu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout, int N, int F) override;
  void rope_forward(const Tensor& out, const Tensor& inp, int B, int T, int heads, int hd, int stride, float theta,
                    const SeqPositions& pos) override;
  void rope_backward(const Tensor& dinp, const Tensor& dout, int B, int T, int heads, int hd, int stride,
                     float theta, const SeqPositions& pos) override;
  void attention_block_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                               const Tensor& v, const AttentionBlockDims& d) override;
  void attention_block_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                const Tensor& v, const AttentionBlockDims& d) override;
  void copy_columns(const Tensor& dst, int dst_stride, const Tensor& src, int src_stride, int rows,
                    int cols) override;
  void crossentropy_forward(const Tensor& losses, const Tensor& lse, const Tensor& logits, const Tensor& targets,
                            int N, int V) override;
  void crossentropy_backward(const Tensor& dlogits, const Tensor& logits, const Tensor& lse,
                             const Tensor& targets, const Tensor& dloss, int N, int V) override;
  void dropout_forward(const Tensor& out, const Tensor& inp, float p, uint64_t seed, uint64_t offset) override;
  void dropout_backward(const Tensor& dinp, const Tensor& dout, float p, uint64_t seed, uint64_t offset) override;
  void gather_rows(const Tensor& out, const Tensor& inp, const Tensor& idx, const Tensor& weight, int M,
                   int C) override;
  void scatter_add_rows(const Tensor& out, const Tensor& inp, const Tensor& idx, const Tensor& weight, int M,
                        int C) override;
  void gathered_row_dot(const Tensor& out, const Tensor& a, const Tensor& idx, const Tensor& b, int M,
                        int C) override;
  double sum_squares(const Tensor& x) override;
  void adamw(const Tensor& param, const Tensor& master, const Tensor& m, const Tensor& v, const Tensor& grad,
             const AdamWArgs& a) override;

 protected:
  void* raw_alloc(size_t bytes) override { return raw_alloc_typed(bytes, DType::kF32); }
  void* raw_alloc_typed(size_t bytes, DType dtype) override;
  void raw_free(void* p) override;

 private:
  using Arg = std::pair<const Tensor*, Tensor*>;  // a device tensor and where its host view goes
  // The op's dtype rule, then every argument translated to its backing; false (the first
  // error kept) when a rule or a translation fails or an earlier op failed.
  bool run(const char* op, const Status& rule, std::initializer_list<Arg> args);
  bool keep(Status s);

  int ordinal_;
  DType storage_;
  std::unique_ptr<engine::Backend> inner_;  // the CPU kernels, on the backing
  Status error_;
};

}  // namespace partrain::gpu::emu
