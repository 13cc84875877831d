// The one tensor/device interface. The model, optimizer and trainer are written once
// against `Backend`; each device implements it:
//   - CPU  (engine/cpu/cpu_backend.h): fp32 everywhere, the reference kernels of
//          engine/cpu/kernels.h (OpenBLAS GEMMs, OpenMP loops).
//   - CUDA (engine/cuda/): bf16 weights and activations, fp32 master weights inside the
//          optimizer, fp32 accumulation; cuBLAS(Lt) GEMMs.
//
// Rules every backend keeps (they are what makes one model code path correct on both):
//  - A Tensor is a non-owning view: device pointer, dtype, shape. Backends hand them out
//    with alloc() and take them back with release(); a view into part of a buffer is made
//    with Tensor::slice/at, which is plain address arithmetic and never touches memory.
//  - Memory is owned explicitly (no managed memory). Every allocation names a category, and
//    the backend tracks the live and the peak bytes per category, so the planner's estimate
//    can be compared with what a run used.
//  - Ops mirror engine/cpu/kernels.h with the same shapes and conventions: activations are
//    [N, C] row-major with N = B*T; every *_backward ACCUMULATES (+=) into its gradient
//    outputs, and an empty Tensor (data == nullptr) as a gradient output means "not needed".
//  - Ops are asynchronous with respect to the host where the device is (CUDA stream order);
//    to_host(), sum_squares() and synchronize() wait for what was queued before them.
//  - Host-side data crossing the interface is always float (F32) or int32_t (I32); the
//    backend converts to and from its storage dtype (e.g. bf16 on CUDA).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"
#include "engine/positions.h"

namespace partrain::engine {

// The element types (common/dtype.h), shared with the communicators' typed buffers.
using partrain::DType;
using partrain::dtype_name;
using partrain::dtype_size;

// What an allocation is for; peak memory is reported per category.
enum class MemCategory : uint8_t { kWeights, kGrads, kOptimizer, kActivations, kWorkspace };
inline constexpr int kNumMemCategories = 5;
inline const char* mem_category_name(MemCategory c) {
  constexpr const char* kNames[kNumMemCategories] = {"weights", "grads", "optimizer",
                                                     "activations", "workspace"};
  return kNames[static_cast<int>(c)];
}

// A shape of up to 4 dimensions (enough for [B, T, H, hd]); no heap allocation.
struct Shape {
  std::array<int64_t, 4> dims{};
  int ndim = 0;
  Shape() = default;
  Shape(std::initializer_list<int64_t> d) {
    for (int64_t x : d) dims[static_cast<size_t>(ndim++)] = x;
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= dims[static_cast<size_t>(i)];
    return n;
  }
  int64_t operator[](int i) const { return dims[static_cast<size_t>(i)]; }
};

// A non-owning view of device memory.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Shape shape;

  bool empty() const { return data == nullptr; }
  int64_t numel() const { return shape.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }
  // Elements [offset, offset + new_shape.numel()) of this tensor, viewed with new_shape.
  Tensor slice(int64_t offset, Shape new_shape) const {
    return Tensor{static_cast<char*>(data) + offset * static_cast<int64_t>(dtype_size(dtype)),
                  dtype, new_shape};
  }
  // Row i of the leading dimension (a [d0, d1, ...] tensor gives a [d1, ...] view).
  Tensor at(int64_t i) const {
    Shape s;
    for (int d = 1; d < shape.ndim; ++d) s.dims[static_cast<size_t>(s.ndim++)] = shape[d];
    if (s.ndim == 0) s = Shape{1};
    return slice(i * s.numel(), s);
  }
};

// Live and peak bytes per category.
struct MemoryStats {
  std::array<size_t, kNumMemCategories> live{};
  std::array<size_t, kNumMemCategories> peak{};
  size_t live_total = 0;
  size_t peak_total = 0;  // peak of the sum, not the sum of peaks
};

// Shapes of a causal self-attention call (see kernels.h attention_forward): q is
// [B,T,H,hd] with `q_stride` elements between tokens, k and v [B,T,KV,hd] with `kv_stride`.
struct AttentionDims {
  int B = 0, T = 0, H = 0, KV = 0, hd = 0;
  int q_stride = 0, kv_stride = 0;
};

// Shapes of one context-parallel attention block (see kernels.h attention_block_forward):
// Tq query rows per sequence at positions q_pos against Tk key/value rows at k_pos.
struct AttentionBlockDims {
  int B = 0, Tq = 0, Tk = 0, H = 0, KV = 0, hd = 0;
  int q_stride = 0, kv_stride = 0;
  SeqPositions q_pos, k_pos;
};

// One AdamW step's scalars; t is the 1-based step, grad_scale multiplies the gradient
// first (1/clip factor folds in here).
struct AdamWArgs {
  float lr = 0, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0;
  int64_t t = 1;
  float grad_scale = 1.0f;
};

class Backend {
 public:
  virtual ~Backend() = default;
  Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  // "cpu" or "cuda:0"; shown in logs.
  virtual std::string name() const = 0;
  // Storage dtypes this backend wants for each role. CPU: all F32. CUDA: bf16 weights and
  // activations; it keeps fp32 master weights itself (see adamw) and chooses its grad dtype.
  virtual DType param_dtype() const = 0;
  virtual DType grad_dtype() const = 0;
  virtual DType act_dtype() const = 0;

  // ---- memory -------------------------------------------------------------------------
  // Allocates a zero-filled tensor and counts it under `category`. Never returns an empty
  // tensor for numel > 0: on failure it returns an error naming the category and size.
  Result<Tensor> alloc(MemCategory category, DType dtype, Shape shape);
  // Gives a tensor from alloc() back; no-op on an empty tensor. Resets *t.
  void release(Tensor* t);
  const MemoryStats& memory() const { return stats_; }

  // ---- host <-> device ------------------------------------------------------------------
  // dst (any float dtype) <- src[0 .. dst.numel()) floats; converts to dst's dtype.
  virtual void to_device(const Tensor& dst, const float* src) = 0;
  virtual void to_device_i32(const Tensor& dst, const int32_t* src) = 0;
  // dst[0 .. src.numel()) <- src (any float dtype), converted to float; waits for the device.
  virtual void to_host(float* dst, const Tensor& src) = 0;
  virtual void to_host_i32(int32_t* dst, const Tensor& src) = 0;
  // True when t's elements are fp32 in host memory that any thread may read directly (a
  // CPU rank's fp32 tensors): an asynchronous checkpoint then copies them on its own
  // thread while the next step computes. False on a device, whose copies go through its
  // stream.
  virtual bool host_readable(const Tensor& /*t*/) const { return false; }
  // Page-locks [p, p + bytes) of host memory for fast device copies (cudaHostRegister), for
  // host buffers reused many times (a checkpoint's staging buffer); false where the backend
  // has no use for it (CPU) or the driver refused (the buffer still works, unpinned).
  // unpin_host undoes it before the memory is freed.
  virtual bool pin_host(void* /*p*/, size_t /*bytes*/) { return false; }
  virtual void unpin_host(void* /*p*/) {}
  // Device-to-device copy of src.numel() elements, same dtype.
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;
  // Waits until every queued op has finished (for timing).
  virtual void synchronize() = 0;
  // The first error any op met, with the call that failed (ops return void: a device keeps
  // its first fault and skips the rest); ok when none. The trainer checks it every step.
  virtual Status status() { return Status::ok(); }

  // ---- elementwise ------------------------------------------------------------------------
  virtual void zero(const Tensor& t) = 0;
  virtual void fill(const Tensor& t, float value) = 0;
  virtual void scale(const Tensor& t, float factor) = 0;          // t *= factor
  virtual void accumulate(const Tensor& dst, const Tensor& src) = 0;  // dst += src
  virtual void residual_forward(const Tensor& out, const Tensor& a, const Tensor& b) = 0;

  // ---- layers (see engine/cpu/kernels.h for the exact math) -------------------------------
  // out [B*T, C]; tokens I32 [B*T]; wpe may be empty (no learned positions).
  virtual void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                                 const Tensor& wpe, int B, int T, int C) = 0;
  virtual void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                                  const Tensor& tokens, int B, int T, int C) = 0;

  virtual void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                 const Tensor& inp, const Tensor& w, const Tensor& b, int N, int C,
                                 float eps) = 0;
  virtual void layernorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& db,
                                  const Tensor& dout, const Tensor& inp, const Tensor& w,
                                  const Tensor& mean, const Tensor& rstd, int N, int C) = 0;

  virtual void rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp,
                               const Tensor& w, int N, int C, float eps) = 0;
  virtual void rmsnorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dout,
                                const Tensor& inp, const Tensor& w, const Tensor& rstd, int N,
                                int C) = 0;

  // out [N,OC] = inp [N,C] @ w[OC,C]^T (+ bias[OC] unless empty).
  virtual void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& w,
                              const Tensor& bias, int N, int C, int OC) = 0;
  virtual void matmul_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias,
                               const Tensor& dout, const Tensor& inp, const Tensor& w, int N,
                               int C, int OC) = 0;

  // q, k, v are views (Tensor::slice) into a packed [N, (H + 2 KV) hd] buffer or separate
  // buffers; strides in `d`. out [B*T, H*hd], lse F32 [B, H, T].
  virtual void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q,
                                 const Tensor& k, const Tensor& v, const AttentionDims& d) = 0;
  virtual void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                  const Tensor& dout, const Tensor& out, const Tensor& lse,
                                  const Tensor& q, const Tensor& k, const Tensor& v,
                                  const AttentionDims& d) = 0;

  virtual void gelu_forward(const Tensor& out, const Tensor& inp) = 0;
  virtual void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) = 0;
  // inp [N, 2F] = [gate | up]; out [N, F] = silu(gate) * up.
  virtual void swiglu_forward(const Tensor& out, const Tensor& inp, int N, int F) = 0;
  virtual void swiglu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout, int N,
                               int F) = 0;
  // x is a view of [B, T, heads, hd] with `stride` elements between tokens; in place allowed.
  // Row t of each sequence is at position pos.at(t) (engine/positions.h: t itself unless the
  // rank holds context-parallel chunks).
  virtual void rope_forward(const Tensor& out, const Tensor& inp, int B, int T, int heads, int hd,
                            int stride, float theta, const SeqPositions& pos) = 0;
  virtual void rope_backward(const Tensor& dinp, const Tensor& dout, int B, int T, int heads,
                             int hd, int stride, float theta, const SeqPositions& pos) = 0;

  // Context parallel: this rank's queries against one block of keys and values (its own or
  // another cp rank's), causal by position, merged into the running out [B*Tq, H*hd] and
  // lse F32 [B, H, Tq] (start: out 0, lse -inf); backward from the final out and lse adds
  // the block's part of dq and the block's dk, dv. See kernels.h attention_block_forward.
  virtual void attention_block_forward(const Tensor& out, const Tensor& lse, const Tensor& q,
                                       const Tensor& k, const Tensor& v,
                                       const AttentionBlockDims& d) = 0;
  virtual void attention_block_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                        const Tensor& dout, const Tensor& out, const Tensor& lse,
                                        const Tensor& q, const Tensor& k, const Tensor& v,
                                        const AttentionBlockDims& d) = 0;
  // dst[r * dst_stride + c] = src[r * src_stride + c] for r < rows, c < cols, one dtype: a
  // block of columns between a packed buffer and a dense one (cp's K/V blocks).
  virtual void copy_columns(const Tensor& dst, int dst_stride, const Tensor& src, int src_stride,
                            int rows, int cols) = 0;

  // losses F32 [N], lse F32 [N], logits [N, V], targets I32 [N] (< 0: ignored).
  virtual void crossentropy_forward(const Tensor& losses, const Tensor& lse, const Tensor& logits,
                                    const Tensor& targets, int N, int V) = 0;
  // dlogits += dloss[n] * (softmax - onehot); dloss F32 [N].
  virtual void crossentropy_backward(const Tensor& dlogits, const Tensor& logits,
                                     const Tensor& lse, const Tensor& targets,
                                     const Tensor& dloss, int N, int V) = 0;

  // Element i kept iff philox_uniform(seed, offset + i) >= p (engine/philox.h), scaled by
  // 1/(1-p); backward regenerates the mask.
  virtual void dropout_forward(const Tensor& out, const Tensor& inp, float p, uint64_t seed,
                               uint64_t offset) = 0;
  virtual void dropout_backward(const Tensor& dinp, const Tensor& dout, float p, uint64_t seed,
                                uint64_t offset) = 0;

  // ---- mixture-of-experts row movement -----------------------------------------------------
  // Routing itself (softmax, top-k, capacity) runs on the host: it is sequential in token
  // order and tiny. These move token rows to and from an expert's packed input.
  // idx I32 [M] row indices into the [N, C] tensor, unique within one call; weight F32 [M]
  // or empty (= all ones).
  // out[i,:] = weight[i] * inp[idx[i], :]         (out [M, C], overwritten)
  virtual void gather_rows(const Tensor& out, const Tensor& inp, const Tensor& idx,
                           const Tensor& weight, int M, int C) = 0;
  // out[idx[i], :] += weight[i] * inp[i, :]      (out [N, C], accumulated)
  virtual void scatter_add_rows(const Tensor& out, const Tensor& inp, const Tensor& idx,
                                const Tensor& weight, int M, int C) = 0;
  // out[i] = dot(a[idx[i], :], b[i, :])          (out F32 [M], overwritten)
  virtual void gathered_row_dot(const Tensor& out, const Tensor& a, const Tensor& idx,
                                const Tensor& b, int M, int C) = 0;

  // ---- optimizer ----------------------------------------------------------------------------
  // Sum of squares of x (fp32 or wider accumulation); waits for the device.
  virtual double sum_squares(const Tensor& x) = 0;
  // One AdamW step on a parameter. m, v (and master, when the backend keeps fp32 master
  // weights: non-empty on CUDA, empty on CPU where param itself is fp32) are F32 tensors
  // of the same numel from alloc(kOptimizer, ...). The update is made on the fp32 copy and
  // written back to param in param's dtype.
  virtual void adamw(const Tensor& param, const Tensor& master, const Tensor& m, const Tensor& v,
                     const Tensor& grad, const AdamWArgs& a) = 0;
  // Whether adamw needs a `master` tensor (true on backends whose param dtype is not F32).
  bool needs_master_weights() const { return param_dtype() != DType::kF32; }

  // ---- fused ops ----------------------------------------------------------------------------
  // Each is defined (backend.cc) as the plain ops above in sequence; a backend overrides one
  // where it has a faster kernel computing the same (the CUDA backend: one pass, a GEMM
  // epilogue, one launch). So every backend, the CPU reference included, runs them.
  //
  // res = a + b, then out = LayerNorm(res) (bias may be empty) / RMSNorm(res).
  virtual void residual_layernorm_forward(const Tensor& res, const Tensor& out, const Tensor& mean,
                                          const Tensor& rstd, const Tensor& a, const Tensor& b,
                                          const Tensor& w, const Tensor& bias, int N, int C, float eps);
  virtual void residual_rmsnorm_forward(const Tensor& res, const Tensor& out, const Tensor& rstd,
                                        const Tensor& a, const Tensor& b, const Tensor& w, int N, int C,
                                        float eps);
  // GELU's linear layer: pre [N,OC] = inp @ w^T (+ bias), out = gelu(pre).
  virtual void matmul_gelu_forward(const Tensor& out, const Tensor& pre, const Tensor& inp, const Tensor& w,
                                   const Tensor& bias, int N, int C, int OC);
  // The layer after a GELU, backward through both: h = gelu(pre) was its input [N,C].
  // dpre = gelu'(pre) * (dout @ w) is WRITTEN (not accumulated); dw, dbias += as
  // matmul_backward. `scratch` [N,C] (activation dtype) holds dout @ w where a backend
  // cannot fuse the two (the default).
  virtual void matmul_gelu_backward(const Tensor& dpre, const Tensor& dw, const Tensor& dbias,
                                    const Tensor& dout, const Tensor& h, const Tensor& w, const Tensor& pre,
                                    const Tensor& scratch, int N, int C, int OC);
  // AdamW on consecutive pieces of flat buffers that differ only in weight decay: piece i is
  // elements [ranges[i].begin, ranges[i].end) with ranges[i].weight_decay (a.weight_decay is
  // not used). Tensors as adamw's; the default runs adamw once per piece.
  struct AdamWRange {
    int64_t begin = 0, end = 0;
    float weight_decay = 0;
  };
  virtual void adamw_multi(const Tensor& param, const Tensor& master, const Tensor& m, const Tensor& v,
                           const Tensor& grad, const std::vector<AdamWRange>& ranges, const AdamWArgs& a);

 protected:
  // The live allocation holding `p`: its start and size in bytes; {nullptr, 0} when none.
  std::pair<void*, size_t> allocation_of(const void* p) const;
  // Raw zero-filled device allocation of `bytes`; nullptr on failure.
  virtual void* raw_alloc(size_t bytes) = 0;
  // The same, told the dtype alloc() asked for (the emulated GPU keeps it, to refuse a bf16
  // allocation read as fp32); by default raw_alloc.
  virtual void* raw_alloc_typed(size_t bytes, DType /*dtype*/) { return raw_alloc(bytes); }
  virtual void raw_free(void* p) = 0;
  // Frees every allocation still live. Derived destructors call it (the base destructor
  // cannot: raw_free is virtual).
  void release_all();

 private:
  MemoryStats stats_;
  std::unordered_map<void*, std::pair<MemCategory, size_t>> live_;  // pointer -> (category, bytes)
};

// The CPU backend (always built).
std::unique_ptr<Backend> make_cpu_backend();

// The CPU backend with bf16 storage of weights and activations (cpu/cpu_bf16_backend.h).
std::unique_ptr<Backend> make_cpu_bf16_backend();

#ifdef PARTRAIN_HAVE_CUDA
// The CUDA backend on device `ordinal` with `storage` weights and activations, defined in
// engine/cuda/ (in the GPU module, and in what links partrain_engine_cuda). Errors (no
// driver, no device) name the device and say what to check.
Result<std::unique_ptr<Backend>> make_cuda_backend(int ordinal, DType storage);
#endif

// "cpu", "cuda" or "cuda:N", with `precision` the storage of weights and activations:
// "fp32", "bf16", or "" for the device's default (fp32 on CPU ranks, bf16 on GPUs).
// Gradients, master weights and optimizer state are fp32 in every mode. cuda comes through
// the GPU module (gpu/cuda_module.h), which an installation without it answers with an
// error saying what to install.
Result<std::unique_ptr<Backend>> make_backend(const std::string& device, const std::string& precision = "");

}  // namespace partrain::engine
