// CudaBackend: each Backend op checks dtypes, picks the float or bf16 instantiation of its
// launcher (kernels.h) and keeps the first error. Host<->device traffic converts on the
// host (bf16 rounding is round-to-nearest-even, as __float2bfloat16_rn).
#include "engine/cuda/cuda_backend.h"

#include "engine/cpu/cpu_bf16_backend.h"  // the bf16 rounding of host values

#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "common/log.h"
#include "engine/cuda/cuda_backend_ops.h"
#include "engine/cuda/cuda_status.h"
#include "engine/cuda/nvtx.h"

namespace partrain::engine {

bool cuda_device_available() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky runtime error so later probes start clean
    return false;
  }
  return count > 0;
}

Result<std::unique_ptr<Backend>> make_cuda_backend(int ordinal, DType storage) {
  auto r = cuda::CudaBackend::create(ordinal, storage);
  if (!r) return r.status();
  return std::unique_ptr<Backend>(std::move(r.value()));
}

namespace cuda {

Result<std::unique_ptr<CudaBackend>> CudaBackend::create(int ordinal, DType storage) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || ordinal < 0 || ordinal >= count) {
    cudaGetLastError();
    return Status::unavailable(
        "cuda:" + std::to_string(ordinal) + ": no such CUDA device (" +
        (err != cudaSuccess ? std::string(cudaGetErrorName(err)) : std::to_string(count) + " found") +
        "); check the NVIDIA driver (nvidia-smi) and the job's GPU allocation, or use --device cpu");
  }
  std::unique_ptr<CudaBackend> be(new CudaBackend());
  be->storage_ = storage;
  if (const char* mode = std::getenv("PARTRAIN_CUDA_ATTENTION")) {
    const std::string m = mode;
    if (m == "flash") {
      be->attention_mode_ = AttentionMode::kFlash;
    } else if (m == "gemm") {
      be->attention_mode_ = AttentionMode::kGemm;
    } else if (m == "cudnn") {
      be->attention_mode_ = AttentionMode::kCudnn;
    } else if (m != "auto" && !m.empty()) {
      return Status::invalid("PARTRAIN_CUDA_ATTENTION='" + m + "': expected auto, cudnn, gemm or flash");
    }
  }
  Status s = context_create(&be->ctx_, ordinal);
  if (!s) return s.prefixed("cuda:" + std::to_string(ordinal) + ": ");
  be->timer_.set_stream(be->ctx_.stream);
  if (const char* prof = std::getenv("PARTRAIN_CUDA_PROFILE"); prof != nullptr && std::string(prof) == "1") {
    be->timer_.set_enabled(true);
  }
  s = cuda_status(cudaMalloc(reinterpret_cast<void**>(&be->dsum_), sizeof(double)),
                  "cudaMalloc(sum_squares accumulator)");
  if (!s) return s;
  return be;
}

CudaBackend::~CudaBackend() {
  if (ctx_.stream) cudaStreamSynchronize(ctx_.stream);
  for (Staging& s : staging_) {
    if (s.host != nullptr) cudaFreeHost(s.host);
    if (s.done != nullptr) cudaEventDestroy(s.done);
  }
  release_all();
  if (dsum_) cudaFree(dsum_);
  context_destroy(&ctx_);
}

void CudaBackend::op_mark(const char* op) {
#ifdef PARTRAIN_HAVE_NVTX
  nvtxMarkA(op);
#endif
  timer_.mark(op);
}

bool CudaBackend::check(Status s) {
  if (!s && error_.is_ok()) {
    log::error("cuda", "{}: {} (further GPU ops are skipped)", name(), s.message());
    error_ = std::move(s);
  }
  return error_.is_ok();
}

Status CudaBackend::status() {
  if (error_.is_ok() && ctx_.stream) check(cuda_status(cudaStreamSynchronize(ctx_.stream), "device"));
  return error_;
}

void* CudaBackend::raw_alloc(size_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    cudaGetLastError();  // out of memory is reported by Backend::alloc, not kept as sticky
    return nullptr;
  }
  if (!check(cuda_status(cudaMemsetAsync(p, 0, bytes, ctx_.stream), "cudaMemsetAsync"))) {
    cudaFree(p);
    return nullptr;
  }
  return p;
}

void CudaBackend::raw_free(void* p) {
  // Work queued on the stream may still read p; cudaFree waits for the device, but make it
  // explicit for the non-blocking stream.
  cudaStreamSynchronize(ctx_.stream);
  cudaFree(p);
}

void* CudaBackend::attention_workspace(size_t bytes) {
  if (attn_ws_.bytes() < bytes) {
    release(&attn_ws_);
    auto t = alloc(MemCategory::kWorkspace, DType::kF32, Shape{static_cast<int64_t>((bytes + 3) / 4)});
    if (!t) {
      check(t.status());
      return nullptr;
    }
    attn_ws_ = *t;
  }
  return attn_ws_.data;
}

// ---- host <-> device ---------------------------------------------------------------------

void CudaBackend::to_device(const Tensor& dst, const float* src) {
  op_mark("to_device");
  if (!ok() || dst.empty()) return;
  if (dst.dtype == DType::kF32) {
    check(cuda_status(cudaMemcpyAsync(dst.data, src, dst.bytes(), cudaMemcpyHostToDevice, ctx_.stream),
                      "to_device"));
  } else if (dst.dtype == DType::kBF16) {
    std::vector<uint16_t> tmp(n_of(dst));
    for (size_t i = 0; i < tmp.size(); ++i) tmp[i] = cpu::to_bf16(src[i]);
    check(cuda_status(cudaMemcpyAsync(dst.data, tmp.data(), dst.bytes(), cudaMemcpyHostToDevice,
                                      ctx_.stream),
                      "to_device"));
    check(cuda_status(cudaStreamSynchronize(ctx_.stream), "to_device"));  // tmp dies here
    return;
  } else {
    check(Status::internal("to_device: an i32 tensor takes to_device_i32"));
  }
  check(cuda_status(cudaStreamSynchronize(ctx_.stream), "to_device"));
}

// Token ids (a micro-batch's inputs and targets) go through a ring of pinned staging
// buffers: the host copies them in and returns; the device copies them out in stream order.
// A slot is reused only after the copy that last read it has run (an event wait, normally on
// a copy long done), so the caller's array may change as soon as this returns, and the step
// is not synchronised.
void CudaBackend::to_device_i32(const Tensor& dst, const int32_t* src) {
  op_mark("to_device_i32");
  if (!ok() || dst.empty()) return;
  Staging& slot = staging_[staging_next_++ % staging_.size()];
  if (slot.done != nullptr && !check(cuda_status(cudaEventSynchronize(slot.done), "to_device_i32"))) return;
  if (slot.done == nullptr &&
      !check(cuda_status(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming), "to_device_i32"))) {
    return;
  }
  if (slot.bytes < dst.bytes()) {
    if (slot.host != nullptr) cudaFreeHost(slot.host);
    slot.host = nullptr;
    slot.bytes = 0;
    if (!check(cuda_status(cudaMallocHost(&slot.host, dst.bytes()), "to_device_i32 (pinned staging)"))) return;
    slot.bytes = dst.bytes();
  }
  std::memcpy(slot.host, src, dst.bytes());
  check(cuda_status(cudaMemcpyAsync(dst.data, slot.host, dst.bytes(), cudaMemcpyHostToDevice, ctx_.stream),
                    "to_device_i32"));
  check(cuda_status(cudaEventRecord(slot.done, ctx_.stream), "to_device_i32"));
}

bool CudaBackend::pin_host(void* p, size_t bytes) {
  // Portable: any context of the process may copy through it. Failing is not an error:
  // the copies still work from pageable memory, more slowly.
  return cudaHostRegister(p, bytes, cudaHostRegisterPortable) == cudaSuccess;
}

void CudaBackend::unpin_host(void* p) { (void)cudaHostUnregister(p); }

void CudaBackend::to_host(float* dst, const Tensor& src) {
  op_mark("to_host");
  if (!ok() || src.empty()) return;
  if (src.dtype == DType::kF32) {
    check(cuda_status(cudaMemcpyAsync(dst, src.data, src.bytes(), cudaMemcpyDeviceToHost, ctx_.stream),
                      "to_host"));
    check(cuda_status(cudaStreamSynchronize(ctx_.stream), "to_host"));
  } else if (src.dtype == DType::kBF16) {
    std::vector<uint16_t> tmp(n_of(src));
    check(cuda_status(cudaMemcpyAsync(tmp.data(), src.data, src.bytes(), cudaMemcpyDeviceToHost,
                                      ctx_.stream),
                      "to_host"));
    if (!check(cuda_status(cudaStreamSynchronize(ctx_.stream), "to_host"))) return;
    for (size_t i = 0; i < tmp.size(); ++i) dst[i] = cpu::from_bf16(tmp[i]);
  } else {
    check(Status::internal("to_host: an i32 tensor takes to_host_i32"));
  }
}

void CudaBackend::to_host_i32(int32_t* dst, const Tensor& src) {
  op_mark("to_host_i32");
  if (!ok() || src.empty()) return;
  check(cuda_status(cudaMemcpyAsync(dst, src.data, src.bytes(), cudaMemcpyDeviceToHost, ctx_.stream),
                    "to_host_i32"));
  check(cuda_status(cudaStreamSynchronize(ctx_.stream), "to_host_i32"));
}

void CudaBackend::copy(const Tensor& dst, const Tensor& src) {
  op_mark("copy");
  if (!ok() || src.empty()) return;
  if (dst.dtype == src.dtype) {
    check(cuda_status(cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDeviceToDevice,
                                      ctx_.stream),
                      "copy"));
    return;
  }
  check(dispatch(src.dtype, [&](auto s) {
    using S = decltype(s);
    return dispatch(dst.dtype, [&](auto d) {
      using D = decltype(d);
      return cuda::convert<S, D>(ctx_, dst.ptr<D>(), src.ptr<S>(), n_of(src));
    });
  }));
}

void CudaBackend::synchronize() {
  if (ok()) check(cuda_status(cudaStreamSynchronize(ctx_.stream), "synchronize"));
}

// ---- elementwise -----------------------------------------------------------------------------

void CudaBackend::zero(const Tensor& t) {
  op_mark("zero");
  if (!ok() || t.empty()) return;
  check(cuda_status(cudaMemsetAsync(t.data, 0, t.bytes(), ctx_.stream), "zero"));
}

void CudaBackend::fill(const Tensor& t, float value) {
  op_mark("fill");
  if (!ok() || t.empty()) return;
  check(dispatch(t.dtype, [&](auto a) {
    using A = decltype(a);
    return cuda::fill<A>(ctx_, t.ptr<A>(), value, n_of(t));
  }));
}

void CudaBackend::scale(const Tensor& t, float factor) {
  op_mark("scale");
  if (!ok() || t.empty()) return;
  check(dispatch(t.dtype, [&](auto a) {
    using A = decltype(a);
    return cuda::scale<A>(ctx_, t.ptr<A>(), factor, n_of(t));
  }));
}

void CudaBackend::accumulate(const Tensor& dst, const Tensor& src) {
  op_mark("accumulate");
  if (!ok() || dst.empty()) return;
  check(dispatch(src.dtype, [&](auto s) {
    using S = decltype(s);
    return dispatch(dst.dtype, [&](auto d) {
      using D = decltype(d);
      return cuda::accumulate<S, D>(ctx_, dst.ptr<D>(), src.ptr<S>(), n_of(dst));
    });
  }));
}

void CudaBackend::residual_forward(const Tensor& out, const Tensor& a, const Tensor& b) {
  op_mark("residual_forward");
  if (!ok() || !check(same_dtype("residual_forward", {&out, &a, &b}))) return;
  check(dispatch(out.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::residual_forward<A>(ctx_, out.ptr<A>(), a.ptr<A>(), b.ptr<A>(), n_of(out));
  }));
}

// ---- layers --------------------------------------------------------------------------------

void CudaBackend::embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                                    const Tensor& wpe, int B, int T, int C) {
  op_mark("embedding_forward");
  if (!ok() || !check(same_dtype("embedding_forward", {&out, &wte, &wpe}))) return;
  check(dispatch(out.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::embedding_forward<A>(ctx_, out.ptr<A>(), tokens.ptr<int32_t>(), wte.ptr<A>(),
                                      wpe.ptr<A>(), B, T, C);
  }));
}

void CudaBackend::embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                                     const Tensor& tokens, int B, int T, int C) {
  op_mark("embedding_backward");
  float *gw = nullptr, *gp = nullptr;
  if (!ok() || !check(f32("embedding_backward", dwte, &gw)) ||
      !check(f32("embedding_backward", dwpe, &gp)))
    return;
  check(dispatch(dout.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::embedding_backward<A>(ctx_, gw, gp, dout.ptr<A>(), tokens.ptr<int32_t>(), B, T, C);
  }));
}

void CudaBackend::layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                    const Tensor& inp, const Tensor& w, const Tensor& b, int N,
                                    int C, float eps) {
  op_mark("layernorm_forward");
  float *mu = nullptr, *rs = nullptr;
  if (!ok() || !check(same_dtype("layernorm_forward", {&out, &inp, &w, &b})) ||
      !check(f32("layernorm_forward", mean, &mu)) || !check(f32("layernorm_forward", rstd, &rs)))
    return;
  check(dispatch(out.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::layernorm_forward<A>(ctx_, out.ptr<A>(), mu, rs, inp.ptr<A>(), w.ptr<A>(),
                                      b.ptr<A>(), N, C, eps);
  }));
}

void CudaBackend::layernorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& db,
                                     const Tensor& dout, const Tensor& inp, const Tensor& w,
                                     const Tensor& mean, const Tensor& rstd, int N, int C) {
  op_mark("layernorm_backward");
  float *gw = nullptr, *gb = nullptr, *mu = nullptr, *rs = nullptr;
  if (!ok() || !check(same_dtype("layernorm_backward", {&dinp, &dout, &inp, &w})) ||
      !check(f32("layernorm_backward", dw, &gw)) || !check(f32("layernorm_backward", db, &gb)) ||
      !check(f32("layernorm_backward", mean, &mu)) || !check(f32("layernorm_backward", rstd, &rs)))
    return;
  check(dispatch(dout.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::layernorm_backward<A>(ctx_, dinp.ptr<A>(), gw, gb, dout.ptr<A>(), inp.ptr<A>(),
                                       w.ptr<A>(), mu, rs, N, C);
  }));
}

void CudaBackend::rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp,
                                  const Tensor& w, int N, int C, float eps) {
  op_mark("rmsnorm_forward");
  float* rs = nullptr;
  if (!ok() || !check(same_dtype("rmsnorm_forward", {&out, &inp, &w})) ||
      !check(f32("rmsnorm_forward", rstd, &rs)))
    return;
  check(dispatch(out.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::rmsnorm_forward<A>(ctx_, out.ptr<A>(), rs, inp.ptr<A>(), w.ptr<A>(), N, C, eps);
  }));
}

void CudaBackend::rmsnorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dout,
                                   const Tensor& inp, const Tensor& w, const Tensor& rstd, int N,
                                   int C) {
  op_mark("rmsnorm_backward");
  float *gw = nullptr, *rs = nullptr;
  if (!ok() || !check(same_dtype("rmsnorm_backward", {&dinp, &dout, &inp, &w})) ||
      !check(f32("rmsnorm_backward", dw, &gw)) || !check(f32("rmsnorm_backward", rstd, &rs)))
    return;
  check(dispatch(dout.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::rmsnorm_backward<A>(ctx_, dinp.ptr<A>(), gw, dout.ptr<A>(), inp.ptr<A>(),
                                     w.ptr<A>(), rs, N, C);
  }));
}

void CudaBackend::matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& w,
                                 const Tensor& bias, int N, int C, int OC) {
  op_mark("matmul_forward");
  if (!ok() || !check(same_dtype("matmul_forward", {&out, &inp, &w, &bias}))) return;
  check(dispatch(out.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::matmul_forward<A>(ctx_, out.ptr<A>(), inp.ptr<A>(), w.ptr<A>(), bias.ptr<A>(), N,
                                   C, OC);
  }));
}

void CudaBackend::matmul_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias,
                                  const Tensor& dout, const Tensor& inp, const Tensor& w, int N,
                                  int C, int OC) {
  op_mark("matmul_backward");
  float *gw = nullptr, *gb = nullptr;
  if (!ok() || !check(same_dtype("matmul_backward", {&dinp, &dout, &inp, &w})) ||
      !check(f32("matmul_backward", dw, &gw)) || !check(f32("matmul_backward", dbias, &gb)))
    return;
  check(dispatch(dout.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::matmul_backward<A>(ctx_, dinp.ptr<A>(), gw, gb, dout.ptr<A>(), inp.ptr<A>(),
                                    w.ptr<A>(), N, C, OC);
  }));
}

void CudaBackend::gelu_forward(const Tensor& out, const Tensor& inp) {
  op_mark("gelu_forward");
  if (!ok() || !check(same_dtype("gelu_forward", {&out, &inp}))) return;
  check(dispatch(out.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::gelu_forward<A>(ctx_, out.ptr<A>(), inp.ptr<A>(), n_of(out));
  }));
}

void CudaBackend::gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  op_mark("gelu_backward");
  if (!ok() || !check(same_dtype("gelu_backward", {&dinp, &inp, &dout}))) return;
  check(dispatch(dinp.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::gelu_backward<A>(ctx_, dinp.ptr<A>(), inp.ptr<A>(), dout.ptr<A>(), n_of(dinp));
  }));
}

void CudaBackend::swiglu_forward(const Tensor& out, const Tensor& inp, int N, int F) {
  op_mark("swiglu_forward");
  if (!ok() || !check(same_dtype("swiglu_forward", {&out, &inp}))) return;
  check(dispatch(out.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::swiglu_forward<A>(ctx_, out.ptr<A>(), inp.ptr<A>(), N, F);
  }));
}

void CudaBackend::swiglu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout,
                                  int N, int F) {
  op_mark("swiglu_backward");
  if (!ok() || !check(same_dtype("swiglu_backward", {&dinp, &inp, &dout}))) return;
  check(dispatch(dinp.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::swiglu_backward<A>(ctx_, dinp.ptr<A>(), inp.ptr<A>(), dout.ptr<A>(), N, F);
  }));
}

void CudaBackend::crossentropy_forward(const Tensor& losses, const Tensor& lse,
                                       const Tensor& logits, const Tensor& targets, int N, int V) {
  op_mark("crossentropy_forward");
  float *lo = nullptr, *l = nullptr;
  if (!ok() || !check(f32("crossentropy_forward", losses, &lo)) ||
      !check(f32("crossentropy_forward", lse, &l)))
    return;
  check(dispatch(logits.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::crossentropy_forward<A>(ctx_, lo, l, logits.ptr<A>(), targets.ptr<int32_t>(), N,
                                         V, V);
  }));
}

void CudaBackend::crossentropy_backward(const Tensor& dlogits, const Tensor& logits,
                                        const Tensor& lse, const Tensor& targets,
                                        const Tensor& dloss, int N, int V) {
  op_mark("crossentropy_backward");
  float *l = nullptr, *dl = nullptr;
  if (!ok() || !check(same_dtype("crossentropy_backward", {&dlogits, &logits})) ||
      !check(f32("crossentropy_backward", lse, &l)) ||
      !check(f32("crossentropy_backward", dloss, &dl)))
    return;
  check(dispatch(logits.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::crossentropy_backward<A>(ctx_, dlogits.ptr<A>(), logits.ptr<A>(), l,
                                          targets.ptr<int32_t>(), dl, N, V, V);
  }));
}

void CudaBackend::dropout_forward(const Tensor& out, const Tensor& inp, float p, uint64_t seed,
                                  uint64_t offset) {
  op_mark("dropout_forward");
  if (!ok() || !check(same_dtype("dropout_forward", {&out, &inp}))) return;
  check(dispatch(out.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::dropout_forward<A>(ctx_, out.ptr<A>(), inp.ptr<A>(), n_of(out), p, seed, offset);
  }));
}

void CudaBackend::dropout_backward(const Tensor& dinp, const Tensor& dout, float p, uint64_t seed,
                                   uint64_t offset) {
  op_mark("dropout_backward");
  if (!ok() || !check(same_dtype("dropout_backward", {&dinp, &dout}))) return;
  check(dispatch(dinp.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::dropout_backward<A>(ctx_, dinp.ptr<A>(), dout.ptr<A>(), n_of(dinp), p, seed,
                                     offset);
  }));
}

// ---- mixture-of-experts rows ------------------------------------------------------------------

void CudaBackend::gather_rows(const Tensor& out, const Tensor& inp, const Tensor& idx,
                              const Tensor& weight, int M, int C) {
  op_mark("gather_rows");
  float* w = nullptr;
  if (!ok() || !check(same_dtype("gather_rows", {&out, &inp})) ||
      !check(f32("gather_rows", weight, &w)))
    return;
  check(dispatch(out.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::gather_rows<A>(ctx_, out.ptr<A>(), inp.ptr<A>(), idx.ptr<int32_t>(), w, M, C);
  }));
}

void CudaBackend::scatter_add_rows(const Tensor& out, const Tensor& inp, const Tensor& idx,
                                   const Tensor& weight, int M, int C) {
  op_mark("scatter_add_rows");
  float* w = nullptr;
  if (!ok() || !check(same_dtype("scatter_add_rows", {&out, &inp})) ||
      !check(f32("scatter_add_rows", weight, &w)))
    return;
  check(dispatch(out.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::scatter_add_rows<A>(ctx_, out.ptr<A>(), inp.ptr<A>(), idx.ptr<int32_t>(), w, M,
                                     C);
  }));
}

void CudaBackend::gathered_row_dot(const Tensor& out, const Tensor& a, const Tensor& idx,
                                   const Tensor& b, int M, int C) {
  op_mark("gathered_row_dot");
  float* o = nullptr;
  if (!ok() || !check(same_dtype("gathered_row_dot", {&a, &b})) ||
      !check(f32("gathered_row_dot", out, &o)))
    return;
  check(dispatch(a.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::gathered_row_dot<A>(ctx_, o, a.ptr<A>(), idx.ptr<int32_t>(), b.ptr<A>(), M, C);
  }));
}

// ---- optimizer ----------------------------------------------------------------------------------

double CudaBackend::sum_squares(const Tensor& x) {
  op_mark("sum_squares");
  if (!ok() || x.empty()) return 0.0;
  if (!check(cuda_status(cudaMemsetAsync(dsum_, 0, sizeof(double), ctx_.stream), "sum_squares")))
    return 0.0;
  if (!check(dispatch(x.dtype, [&](auto t) {
        using A = decltype(t);
        return cuda::sum_squares<A>(ctx_, dsum_, x.ptr<A>(), n_of(x));
      })))
    return 0.0;
  double result = 0.0;
  check(cuda_status(cudaMemcpyAsync(&result, dsum_, sizeof(double), cudaMemcpyDeviceToHost,
                                    ctx_.stream),
                    "sum_squares"));
  check(cuda_status(cudaStreamSynchronize(ctx_.stream), "sum_squares"));
  return result;
}

void CudaBackend::adamw(const Tensor& param, const Tensor& master, const Tensor& m,
                        const Tensor& v, const Tensor& grad, const AdamWArgs& a) {
  op_mark("adamw");
  float *pm = nullptr, *mm = nullptr, *vv = nullptr, *g = nullptr;
  if (!ok() || !check(f32("adamw", master, &pm)) || !check(f32("adamw", m, &mm)) ||
      !check(f32("adamw", v, &vv)) || !check(f32("adamw", grad, &g)))
    return;
  const size_t n = n_of(param);
  if (param.dtype == DType::kF32) {  // an fp32 parameter is its own master copy
    check(cuda::adamw_update(ctx_, param.ptr<float>(), mm, vv, g, nullptr, n, a.lr, a.beta1,
                             a.beta2, a.eps, a.weight_decay, a.t, a.grad_scale));
    return;
  }
  if (pm == nullptr) {
    check(Status::internal("adamw: a bf16 parameter needs its fp32 master tensor"));
    return;
  }
  check(cuda::adamw_update(ctx_, pm, mm, vv, g, param.ptr<bf16>(), n, a.lr, a.beta1, a.beta2,
                           a.eps, a.weight_decay, a.t, a.grad_scale));
}

}  // namespace cuda
}  // namespace partrain::engine
