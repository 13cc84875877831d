// The CUDA backend: engine::Backend on one NVIDIA GPU. Storage: bf16 weights and
// activations, fp32 gradients (so accumulation over micro-batches and the embedding
// scatter stay fp32), fp32 master weights and moments inside adamw(); every op is a
// launcher of engine/cuda/kernels.h on the backend's stream.
//
// Errors: Backend ops return void, so the first CUDA/cuBLAS error is kept (and logged once)
// and every later op is skipped; status() reports it and synchronize()/to_host() surface
// faults from earlier kernels. Memory: cudaMalloc only (never managed), counted per
// category by Backend::alloc.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/phase_timer.h"

namespace partrain::engine {

// False when the CUDA runtime finds no usable device (no driver: cudaGetDeviceCount
// returns cudaErrorInsufficientDriver or cudaErrorNoDevice). Never throws or exits.
bool cuda_device_available();

// Declared in engine/backend.h too (under PARTRAIN_HAVE_CUDA); repeated here so users of
// this library need not define that macro.
Result<std::unique_ptr<Backend>> make_cuda_backend(int ordinal, DType storage);

namespace cuda {

class CudaBackend final : public Backend {
 public:
  // `storage`: the dtype of weights and activations, kBF16 (training) or kF32 (equivalence
  // tests against the CPU backend).
  static Result<std::unique_ptr<CudaBackend>> create(int ordinal, DType storage = DType::kBF16);
  ~CudaBackend() override;

  // The first error any op met (ok when none); also checks for pending device faults.
  Status status() override;
  const Context& context() const { return ctx_; }
  // Device time per Backend op (PhaseTimer): enabled, every op records an event first, and
  // finish() attributes the time between consecutive ops to the earlier one's name. Also on
  // from the start with PARTRAIN_CUDA_PROFILE=1. Every op also drops an NVTX marker of its name.
  PhaseTimer& op_timer() { return timer_; }

  std::string name() const override { return "cuda:" + std::to_string(ctx_.device); }
  DType param_dtype() const override { return storage_; }
  DType grad_dtype() const override { return DType::kF32; }
  DType act_dtype() const override { return storage_; }

  void to_device(const Tensor& dst, const float* src) override;
  void to_device_i32(const Tensor& dst, const int32_t* src) override;
  void to_host(float* dst, const Tensor& src) override;
  void to_host_i32(int32_t* dst, const Tensor& src) override;
  bool pin_host(void* p, size_t bytes) override;
  void unpin_host(void* p) override;
  // Same dtype: a device copy; otherwise converted (e.g. bf16 params -> fp32 master).
  void copy(const Tensor& dst, const Tensor& src) override;
  void synchronize() override;

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
  // Rows at any positions (whole sequences, or context parallelism's chunks).
  void rope_forward(const Tensor& out, const Tensor& inp, int B, int T, int heads, int hd,
                    int stride, float theta, const SeqPositions& pos) override;
  void rope_backward(const Tensor& dinp, const Tensor& dout, int B, int T, int heads, int hd,
                     int stride, float theta, const SeqPositions& pos) override;
  // Context parallelism's attention blocks (attention_block.cu): one warp per row, fp32 math.
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

  // Fused ops (cuda_backend_fused.cc).
  void residual_layernorm_forward(const Tensor& res, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                  const Tensor& a, const Tensor& b, const Tensor& w, const Tensor& bias, int N,
                                  int C, float eps) override;
  void residual_rmsnorm_forward(const Tensor& res, const Tensor& out, const Tensor& rstd, const Tensor& a,
                                const Tensor& b, const Tensor& w, int N, int C, float eps) override;
  void matmul_gelu_forward(const Tensor& out, const Tensor& pre, const Tensor& inp, const Tensor& w,
                           const Tensor& bias, int N, int C, int OC) override;
  void matmul_gelu_backward(const Tensor& dpre, const Tensor& dw, const Tensor& dbias, const Tensor& dout,
                            const Tensor& h, const Tensor& w, const Tensor& pre, const Tensor& scratch, int N,
                            int C, int OC) override;
  // One launch over every range (the "adamw" path; else the default, a launch per range).
  void adamw_multi(const Tensor& param, const Tensor& master, const Tensor& m, const Tensor& v,
                   const Tensor& grad, const std::vector<AdamWRange>& ranges, const AdamWArgs& a) override;

 protected:
  void* raw_alloc(size_t bytes) override;
  void raw_free(void* p) override;

 private:
  CudaBackend() = default;
  // Keeps the first error; true while no error has happened (so ops can bail out early).
  bool check(Status s);
  void op_mark(const char* op);
  bool ok() const { return error_.is_ok(); }
  // The attention workspace, grown on demand (category workspace).
  void* attention_workspace(size_t bytes);
  // The attention path: PARTRAIN_CUDA_ATTENTION=auto|cudnn|gemm|flash. auto (the default):
  // cuDNN's fused SDPA where it runs (bf16, the "cudnn" kernel path on, cuDNN loadable, the
  // shape supported), else as before: the GEMM path, or the flash-style kernels where the
  // GEMM path's T x T workspace would pass 4 GiB. cudnn: cuDNN or an error. gemm, flash:
  // that path only.
  bool use_flash(const AttentionDims& d, size_t gemm_workspace_bytes) const;
  bool try_cudnn() const;
  bool cudnn_fell_back(const Status& s, const char* op);
  Status attention_backward_cudnn(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                  const Tensor& out, const float* lse, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const AttentionDims& d);

  Result<const AdamWSegment*> adamw_segments(const std::vector<AdamWRange>& ranges);
  struct SegmentTable {
    std::vector<AdamWSegment> host;
    Tensor device;
  };
  std::vector<SegmentTable> segment_tables_;
  struct Staging {
    void* host = nullptr;  // pinned
    size_t bytes = 0;
    cudaEvent_t done = nullptr;  // after the copy that last read it
  };
  std::array<Staging, 8> staging_{};
  size_t staging_next_ = 0;

  Context ctx_;
  PhaseTimer timer_;
  Status error_;
  DType storage_ = DType::kBF16;
  double* dsum_ = nullptr;  // device accumulator for sum_squares
  Tensor attn_ws_;
  enum class AttentionMode { kAuto, kGemm, kFlash, kCudnn } attention_mode_ = AttentionMode::kAuto;
  bool cudnn_fallback_logged_ = false;
};

}  // namespace cuda
}  // namespace partrain::engine
