// CudaBackend's attention ops: causal self-attention (cuDNN's fused SDPA where it runs, else
// the GEMM or flash-style kernels of attention.cu), RoPE at any positions, and context
// parallelism's attention blocks (attention_block.cu) and column copies.
#include <string>

#include "common/log.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_backend_ops.h"
#include "engine/cuda/cuda_status.h"

namespace partrain::engine::cuda {

bool CudaBackend::use_flash(const AttentionDims& d, size_t gemm_workspace_bytes) const {
  constexpr size_t kGemmWorkspaceLimit = size_t{4} << 30;
  if (!cuda::attention_flash_supported(d.hd)) return false;
  if (attention_mode_ == AttentionMode::kFlash) return true;
  if (attention_mode_ == AttentionMode::kGemm) return false;
  return gemm_workspace_bytes > kGemmWorkspaceLimit;  // auto (and cudnn's fallback)
}

bool CudaBackend::try_cudnn() const {
  return (attention_mode_ == AttentionMode::kAuto || attention_mode_ == AttentionMode::kCudnn) &&
         storage_ == DType::kBF16 && ctx_.opt.cudnn_attention;
}

// A cuDNN refusal: an error when cudnn was asked for by name, else logged once and the
// next path runs. True when the caller should fall back.
bool CudaBackend::cudnn_fell_back(const Status& s, const char* op) {
  if (s.is_ok()) return false;
  if (s.code() != StatusCode::kUnavailable || attention_mode_ == AttentionMode::kCudnn) {
    check(s.prefixed(std::string(op) + " (cuDNN): "));
    return false;
  }
  if (!cudnn_fallback_logged_) {
    log::info("cuda", "{}: cuDNN attention not used ({}); using partrain's attention kernels", name(), s.message());
    cudnn_fallback_logged_ = true;
  }
  return true;
}

void CudaBackend::attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q,
                                    const Tensor& k, const Tensor& v, const AttentionDims& d) {
  op_mark("attention_forward");
  float* l = nullptr;
  if (!ok() || !check(same_dtype("attention_forward", {&out, &q, &k, &v})) ||
      !check(f32("attention_forward", lse, &l)))
    return;
  if (try_cudnn() && out.dtype == DType::kBF16) {
    const Status s = cuda::attention_forward_cudnn<bf16>(ctx_, out.ptr<bf16>(), l, q.ptr<bf16>(), k.ptr<bf16>(),
                                                         v.ptr<bf16>(), d.B, d.T, d.H, d.KV, d.hd, d.q_stride,
                                                         d.kv_stride);
    if (!cudnn_fell_back(s, "attention_forward")) return;
  }
  check(dispatch(out.dtype, [&](auto t) {
    using A = decltype(t);
    const size_t bytes = cuda::attention_workspace_bytes<A>(d.B, d.T, d.H, d.KV, d.hd);
    if (use_flash(d, bytes)) {
      return cuda::attention_forward_flash<A>(ctx_, out.ptr<A>(), l, q.ptr<A>(), k.ptr<A>(),
                                              v.ptr<A>(), d.B, d.T, d.H, d.KV, d.hd, d.q_stride,
                                              d.kv_stride);
    }
    void* ws = attention_workspace(bytes);
    if (ws == nullptr) return error_;
    return cuda::attention_forward<A>(ctx_, out.ptr<A>(), l, q.ptr<A>(), k.ptr<A>(), v.ptr<A>(),
                                      d.B, d.T, d.H, d.KV, d.hd, d.q_stride, d.kv_stride, ws);
  }));
}

// cuDNN writes dq, dk, dv; the Backend contract adds them. So it writes into scratch with
// the same strides (one packed buffer when dq, dk, dv are the views of one) and the scratch
// is added in.
Status CudaBackend::attention_backward_cudnn(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                             const Tensor& dout, const Tensor& out, const float* lse,
                                             const Tensor& q, const Tensor& k, const Tensor& v,
                                             const AttentionDims& d) {
  const size_t N = static_cast<size_t>(d.B) * d.T, qw = static_cast<size_t>(d.H) * d.hd,
               kw = static_cast<size_t>(d.KV) * d.hd;
  const bool packed = !dq.empty() && d.q_stride == d.kv_stride && dk.data == dq.ptr<bf16>() + qw &&
                      dv.data == dq.ptr<bf16>() + qw + kw;
  const size_t q_elems = N * d.q_stride, kv_elems = N * d.kv_stride;
  void* ws = attention_workspace((packed ? q_elems : q_elems + 2 * kv_elems) * sizeof(bf16));
  if (ws == nullptr) return error_;
  bf16* sq = static_cast<bf16*>(ws);
  bf16* sk = packed ? sq + qw : sq + q_elems;
  bf16* sv = packed ? sq + qw + kw : sk + kv_elems;
  PARTRAIN_RETURN_IF_ERROR(cuda::attention_backward_cudnn<bf16>(
      ctx_, sq, sk, sv, dout.ptr<bf16>(), out.ptr<bf16>(), lse, q.ptr<bf16>(), k.ptr<bf16>(), v.ptr<bf16>(), d.B, d.T,
      d.H, d.KV, d.hd, d.q_stride, d.kv_stride));
  const int rows = static_cast<int>(N);
  if (!dq.empty()) {
    PARTRAIN_RETURN_IF_ERROR(cuda::add_columns<bf16>(ctx_, dq.ptr<bf16>(), d.q_stride, sq, d.q_stride, rows,
                                                     static_cast<int>(qw)));
  }
  if (!dk.empty()) {
    PARTRAIN_RETURN_IF_ERROR(cuda::add_columns<bf16>(ctx_, dk.ptr<bf16>(), d.kv_stride, sk, d.kv_stride, rows,
                                                     static_cast<int>(kw)));
  }
  if (!dv.empty()) {
    PARTRAIN_RETURN_IF_ERROR(cuda::add_columns<bf16>(ctx_, dv.ptr<bf16>(), d.kv_stride, sv, d.kv_stride, rows,
                                                     static_cast<int>(kw)));
  }
  return Status::ok();
}

void CudaBackend::attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                     const Tensor& dout, const Tensor& out, const Tensor& lse,
                                     const Tensor& q, const Tensor& k, const Tensor& v,
                                     const AttentionDims& d) {
  op_mark("attention_backward");
  float* l = nullptr;
  if (!ok() ||
      !check(same_dtype("attention_backward", {&dq, &dk, &dv, &dout, &out, &q, &k, &v})) ||
      !check(f32("attention_backward", lse, &l)))
    return;
  if (try_cudnn() && dout.dtype == DType::kBF16) {
    const Status s = attention_backward_cudnn(dq, dk, dv, dout, out, l, q, k, v, d);
    if (!cudnn_fell_back(s, "attention_backward")) return;
  }
  check(dispatch(dout.dtype, [&](auto t) {
    using A = decltype(t);
    const size_t bytes = cuda::attention_workspace_bytes<A>(d.B, d.T, d.H, d.KV, d.hd);
    if (use_flash(d, bytes)) {
      void* delta = attention_workspace(cuda::attention_flash_workspace_bytes(d.B, d.T, d.H));
      if (delta == nullptr) return error_;
      return cuda::attention_backward_flash<A>(
          ctx_, dq.ptr<A>(), dk.ptr<A>(), dv.ptr<A>(), dout.ptr<A>(), out.ptr<A>(), l, q.ptr<A>(),
          k.ptr<A>(), v.ptr<A>(), d.B, d.T, d.H, d.KV, d.hd, d.q_stride, d.kv_stride,
          static_cast<float*>(delta));
    }
    void* ws = attention_workspace(bytes);
    if (ws == nullptr) return error_;
    return cuda::attention_backward<A>(ctx_, dq.ptr<A>(), dk.ptr<A>(), dv.ptr<A>(), dout.ptr<A>(),
                                       out.ptr<A>(), l, q.ptr<A>(), k.ptr<A>(), v.ptr<A>(), d.B,
                                       d.T, d.H, d.KV, d.hd, d.q_stride, d.kv_stride, ws);
  }));
}

void CudaBackend::rope_forward(const Tensor& out, const Tensor& inp, int B, int T, int heads,
                               int hd, int stride, float theta, const SeqPositions& pos) {
  op_mark("rope_forward");
  if (!ok() || !check(same_dtype("rope_forward", {&out, &inp}))) return;
  check(dispatch(out.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::rope_forward<A>(ctx_, out.ptr<A>(), inp.ptr<A>(), B, T, heads, hd, stride, theta, pos);
  }));
}

void CudaBackend::rope_backward(const Tensor& dinp, const Tensor& dout, int B, int T, int heads,
                                int hd, int stride, float theta, const SeqPositions& pos) {
  op_mark("rope_backward");
  if (!ok() || !check(same_dtype("rope_backward", {&dinp, &dout}))) return;
  check(dispatch(dinp.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::rope_backward<A>(ctx_, dinp.ptr<A>(), dout.ptr<A>(), B, T, heads, hd, stride, theta, pos);
  }));
}

namespace {
AttentionBlockArgs block_args(const AttentionBlockDims& d) {
  AttentionBlockArgs a;
  a.B = d.B, a.Tq = d.Tq, a.Tk = d.Tk, a.H = d.H, a.KV = d.KV, a.hd = d.hd;
  a.q_stride = d.q_stride, a.kv_stride = d.kv_stride;
  a.q_pos = d.q_pos, a.k_pos = d.k_pos;
  return a;
}
}  // namespace

void CudaBackend::attention_block_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                          const Tensor& v, const AttentionBlockDims& d) {
  op_mark("attention_block_forward");
  float* l = nullptr;
  if (!ok() || !check(same_dtype("attention_block_forward", {&out, &q, &k, &v})) ||
      !check(f32("attention_block_forward", lse, &l)))
    return;
  check(dispatch(out.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::attention_block_forward<A>(ctx_, out.ptr<A>(), l, q.ptr<A>(), k.ptr<A>(), v.ptr<A>(),
                                            block_args(d));
  }));
}

void CudaBackend::attention_block_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                           const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                           const Tensor& v, const AttentionBlockDims& d) {
  op_mark("attention_block_backward");
  float* l = nullptr;
  if (!ok() || !check(same_dtype("attention_block_backward", {&dq, &dk, &dv, &dout, &out, &q, &k, &v})) ||
      !check(f32("attention_block_backward", lse, &l)))
    return;
  void* delta = attention_workspace(static_cast<size_t>(d.B) * d.H * d.Tq * sizeof(float));
  if (delta == nullptr) return;
  check(dispatch(dout.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::attention_block_backward<A>(ctx_, dq.ptr<A>(), dk.ptr<A>(), dv.ptr<A>(), dout.ptr<A>(),
                                             out.ptr<A>(), l, q.ptr<A>(), k.ptr<A>(), v.ptr<A>(), block_args(d),
                                             static_cast<float*>(delta));
  }));
}

void CudaBackend::copy_columns(const Tensor& dst, int dst_stride, const Tensor& src, int src_stride, int rows,
                               int cols) {
  op_mark("copy_columns");
  if (!ok() || rows == 0 || cols == 0) return;
  if (dst.dtype != src.dtype) {
    check(Status::internal("cuda backend: copy_columns needs one dtype"));
    return;
  }
  const size_t e = dtype_size(dst.dtype);
  check(cuda_status(cudaMemcpy2DAsync(dst.data, dst_stride * e, src.data, src_stride * e, cols * e,
                                      static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, ctx_.stream),
                    "copy_columns"));
}

}  // namespace partrain::engine::cuda
