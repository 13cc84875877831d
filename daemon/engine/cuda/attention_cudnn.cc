// Causal grouped-query attention through cuDNN's fused flash attention (the "cudnn" path),
// built as cudnn-frontend's SDPA node expands for cuDNN 9 (its scaled_dot_product_flash_
// attention.h, read and rewritten on cudnn_graph.h):
//
//   forward:  S = Q K^T; S *= 1/sqrt(hd); S = row >= col ? S : -inf; M = rowmax(S);
//             E = exp(S - M); Z = rowsum(E); Stats = M + log Z (our lse); P = E / Z (bf16);
//             O = P V
//   backward: D = rowsum(dO * O); S = (Q K^T) / sqrt(hd) - Stats, causal mask; P = exp(S);
//             dV = P^T dO; dS = P * (dO V^T - D) / sqrt(hd); dK = dS^T Q; dQ = dS K
//   (GQA: dK, dV over all query heads, then summed over each kv head's group.)
//
// Q/K/V are the model's views into the packed [B*T, (H + 2 KV) hd] buffer (strides, no
// copies); O and dO are [B*T, H*hd]; lse [B,H,T] fp32 is cuDNN's Stats. dQ is written by a
// plain matmul (cudnn-frontend's "deterministic" form: no fp32 dQ accumulator with atomics)
// and engines that cuDNN marks non-deterministic are skipped, so reruns are bit-identical.
// One graph per shape, built on first use and cached; bf16 only.
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "engine/cuda/cuda_status.h"
#include "engine/cuda/kernels.h"

#ifdef PARTRAIN_HAVE_CUDNN
#include "engine/cuda/cudnn_graph.h"
#endif

namespace partrain::engine::cuda {

#ifdef PARTRAIN_HAVE_CUDNN

namespace {

struct SdpaKey {
  int B, T, H, KV, hd, q_stride, kv_stride;
  bool backward;
  bool operator==(const SdpaKey& o) const {
    return B == o.B && T == o.T && H == o.H && KV == o.KV && hd == o.hd && q_stride == o.q_stride &&
           kv_stride == o.kv_stride && backward == o.backward;
  }
};

// The ids of a built graph's real tensors.
struct SdpaGraph {
  SdpaKey key{};
  std::unique_ptr<CudnnGraph> g;
  Status status;  // not ok: cuDNN refused the key (the message says why)
  int64_t q = 0, k = 0, v = 0, o = 0, stats = 0, dq = 0, dk = 0, dv = 0, dout = 0, softmax_sum = 0;
};

using Dims = std::vector<int64_t>;

// How the causal mask's index tensors are computed: cudnn-frontend 1.x set an int32 compute
// type on GEN_INDEX, later ones leave it fp32; cuDNN versions differ in which they accept,
// so both are tried.
enum class MaskStyle { kFloatIndex, kIntIndex };

// S' = causal(S): keys after the query's position become -inf (lowest before cuDNN 9.10).
int64_t causal_mask(CudnnGraph& g, const CudnnLib& lib, int64_t s, const Dims& dims, const Dims& strides,
                    MaskStyle style) {
  const cudnnDataType_t ic = style == MaskStyle::kIntIndex ? CUDNN_DATA_INT32 : CUDNN_DATA_FLOAT;
  const int64_t row = g.virt(dims, strides, CUDNN_DATA_INT32), col = g.virt(dims, strides, CUDNN_DATA_INT32);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, 0, 0, row, ic, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, 0, 0, col, ic, 3);
  const int64_t keep = g.virt(dims, strides, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, col, 0, keep, CUDNN_DATA_BOOLEAN);
  const float neg = lib.version < 91000 ? std::numeric_limits<float>::lowest() : -INFINITY;
  const int64_t out = g.virt(dims, strides);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, g.scalar(neg), keep, out);
  return out;
}

void build_forward(SdpaGraph& sg, const CudnnLib& lib, MaskStyle style) {
  const SdpaKey& k = sg.key;
  CudnnGraph& g = *sg.g;
  const int64_t b = k.B, h = k.H, hk = k.KV, s = k.T, d = k.hd, qs = k.q_stride, ks = k.kv_stride;
  sg.q = g.real({b, h, s, d}, {s * qs, d, qs, 1}, CUDNN_DATA_BFLOAT16);
  sg.k = g.real({b, hk, d, s}, {s * ks, d, 1, ks}, CUDNN_DATA_BFLOAT16);  // K^T: a view
  sg.v = g.real({b, hk, s, d}, {s * ks, d, ks, 1}, CUDNN_DATA_BFLOAT16);
  sg.o = g.real({b, h, s, d}, {s * h * d, d, h * d, 1}, CUDNN_DATA_BFLOAT16);
  sg.stats = g.real({b, h, s, 1}, {h * s, s, 1, 1}, CUDNN_DATA_FLOAT);
  const Dims sd{b, h, s, s}, ss{h * s * s, s * s, s, 1}, rd{b, h, s, 1}, rs{h * s, s, 1, 1};
  const int64_t scores = g.virt(sd, ss);
  g.matmul(sg.q, sg.k, scores);
  const int64_t scaled = g.virt(sd, ss);
  g.pointwise(CUDNN_POINTWISE_MUL, scores, g.scalar(1.0f / std::sqrt(static_cast<float>(d))), 0, scaled);
  const int64_t masked = causal_mask(g, lib, scaled, sd, ss, style);
  const int64_t mx = g.virt(rd, rs);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, masked, mx);
  const int64_t shifted = g.virt(sd, ss), e = g.virt(sd, ss);
  g.pointwise(CUDNN_POINTWISE_SUB, masked, mx, 0, shifted);
  g.pointwise(CUDNN_POINTWISE_EXP, shifted, 0, 0, e);
  const int64_t z = g.virt(rd, rs), logz = g.virt(rd, rs);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, z);
  g.pointwise(CUDNN_POINTWISE_LOG, z, 0, 0, logz);
  g.pointwise(CUDNN_POINTWISE_ADD, mx, logz, 0, sg.stats);
  const int64_t p = g.virt(sd, ss, CUDNN_DATA_BFLOAT16);
  g.pointwise(CUDNN_POINTWISE_DIV, e, z, 0, p);
  g.matmul(p, sg.v, sg.o);
}

// dX over the kv heads: directly when every query head has its own, else over all query
// heads (bf16, virtual) summed over each group.
void grouped_matmul(CudnnGraph& g, int64_t a, int64_t bm, int64_t out, int64_t b, int64_t h, int64_t hk,
                    int64_t s, int64_t d) {
  if (h == hk) {
    g.matmul(a, bm, out);
    return;
  }
  const int64_t full = g.virt({b, h, s, d}, {h * s * d, s * d, d, 1}, CUDNN_DATA_BFLOAT16);
  g.matmul(a, bm, full);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, out);
}

void build_backward(SdpaGraph& sg, const CudnnLib& lib, MaskStyle style) {
  const SdpaKey& k = sg.key;
  CudnnGraph& g = *sg.g;
  const int64_t b = k.B, h = k.H, hk = k.KV, s = k.T, d = k.hd, qs = k.q_stride, ks = k.kv_stride;
  sg.q = g.real({b, h, s, d}, {s * qs, d, qs, 1}, CUDNN_DATA_BFLOAT16);
  sg.k = g.real({b, hk, d, s}, {s * ks, d, 1, ks}, CUDNN_DATA_BFLOAT16);  // K^T
  sg.v = g.real({b, hk, d, s}, {s * ks, d, 1, ks}, CUDNN_DATA_BFLOAT16);  // V^T
  sg.o = g.real({b, h, s, d}, {s * h * d, d, h * d, 1}, CUDNN_DATA_BFLOAT16);
  sg.dout = g.real({b, h, s, d}, {s * h * d, d, h * d, 1}, CUDNN_DATA_BFLOAT16);
  sg.stats = g.real({b, h, s, 1}, {h * s, s, 1, 1}, CUDNN_DATA_FLOAT);
  sg.dq = g.real({b, h, s, d}, {s * qs, d, qs, 1}, CUDNN_DATA_BFLOAT16);
  sg.dk = g.real({b, hk, s, d}, {s * ks, d, ks, 1}, CUDNN_DATA_BFLOAT16);
  sg.dv = g.real({b, hk, s, d}, {s * ks, d, ks, 1}, CUDNN_DATA_BFLOAT16);
  const Dims sd{b, h, s, s}, ss{h * s * s, s * s, s, 1}, st{h * s * s, s * s, 1, s};
  const Dims rd{b, h, s, 1}, rs{h * s, s, 1, 1};
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  // D = rowsum(dO * O), kept in the workspace (softmax_sum).
  const int64_t dodo = g.virt({b, h, s, d}, {h * s * d, s * d, h * d, 1});
  g.pointwise(CUDNN_POINTWISE_MUL, sg.dout, sg.o, 0, dodo);
  const int64_t rowsum = g.virt(rd, rs);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, dodo, rowsum);
  sg.softmax_sum = g.real(rd, rs, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, rowsum, g.scalar(1.0f), 0, sg.softmax_sum);
  // P = exp(scale Q K^T - Stats), causal.
  const int64_t scores = g.virt(sd, ss), scaled = g.virt(sd, ss), centered = g.virt(sd, ss);
  g.matmul(sg.q, sg.k, scores);
  g.pointwise(CUDNN_POINTWISE_MUL, scores, g.scalar(scale), 0, scaled);
  g.pointwise(CUDNN_POINTWISE_SUB, scaled, sg.stats, 0, centered);
  const int64_t masked = causal_mask(g, lib, centered, sd, ss, style);
  const int64_t p = g.virt(sd, ss);
  g.pointwise(CUDNN_POINTWISE_EXP, masked, 0, 0, p);
  // dV = P^T dO.
  const int64_t pt = g.virt(sd, st, CUDNN_DATA_BFLOAT16);
  g.reshape(p, pt);
  grouped_matmul(g, pt, sg.dout, sg.dv, b, h, hk, s, d);
  // dS = P (dO V^T - D) scale.
  const int64_t dp = g.virt(sd, ss), dpc = g.virt(sd, ss), dpp = g.virt(sd, ss), ds = g.virt(sd, ss);
  g.matmul(sg.dout, sg.v, dp);
  g.pointwise(CUDNN_POINTWISE_SUB, dp, sg.softmax_sum, 0, dpc);
  g.pointwise(CUDNN_POINTWISE_MUL, dpc, p, 0, dpp);
  g.pointwise(CUDNN_POINTWISE_MUL, dpp, g.scalar(scale), 0, ds);
  // dK = dS^T Q.
  const int64_t dst = g.virt(sd, st, CUDNN_DATA_BFLOAT16);
  g.reshape(ds, dst);
  grouped_matmul(g, dst, sg.q, sg.dk, b, h, hk, s, d);
  // dQ = dS K (K^T viewed back as K).
  const int64_t kk = g.virt({b, hk, s, d}, {s * ks, d, ks, 1});
  g.reshape(sg.k, kk);
  g.matmul(ds, kk, sg.dq);
}

}  // namespace

class CudnnAttention {
 public:
  ~CudnnAttention() {
    if (workspace_ != nullptr) cudaFree(workspace_);
    if (softmax_sum_ != nullptr) cudaFree(softmax_sum_);
    graphs_.clear();
    if (handle_ != nullptr && lib_ != nullptr) lib_->Destroy(handle_);
  }

  // The built graph of `key` (building it on first use), or the reason it cannot run.
  Result<SdpaGraph*> graph(const Context& ctx, const SdpaKey& key) {
    PARTRAIN_RETURN_IF_ERROR(init(ctx));
    for (auto& sg : graphs_) {
      if (sg->key == key) {
        if (!sg->status) return sg->status;
        return sg.get();
      }
    }
    auto sg = std::make_unique<SdpaGraph>();
    sg->key = key;
    std::string why;
    for (MaskStyle style : {MaskStyle::kFloatIndex, MaskStyle::kIntIndex}) {
      sg->g = std::make_unique<CudnnGraph>(*lib_);
      if (key.backward) {
        build_backward(*sg, *lib_, style);
      } else {
        build_forward(*sg, *lib_, style);
      }
      sg->status = sg->g->build(handle_, /*deterministic=*/true);
      if (sg->status) break;
      why += (why.empty() ? "" : "; ") + sg->status.message();
    }
    if (!sg->status) sg->status = Status::unavailable("cuDNN SDPA " + std::string(key.backward ? "backward" : "forward") + ": " + why);
    graphs_.push_back(std::move(sg));
    if (!graphs_.back()->status) return graphs_.back()->status;
    return graphs_.back().get();
  }

  cudnnHandle_t handle() const { return handle_; }

  // Device buffers of at least `bytes` (grown, never shrunk).
  Result<void*> workspace(size_t bytes) { return grow(&workspace_, &workspace_bytes_, bytes); }
  Result<void*> softmax_sum(size_t bytes) { return grow(&softmax_sum_, &softmax_sum_bytes_, bytes); }

 private:
  Status init(const Context& ctx) {
    if (handle_ != nullptr) return Status::ok();
    if (!init_status_) return init_status_;
    Result<const CudnnLib*> lib = CudnnLib::get();
    if (!lib) return init_status_ = lib.status();
    lib_ = *lib;
    init_status_ = lib_->check(lib_->Create(&handle_), "cudnnCreate");
    if (init_status_) init_status_ = lib_->check(lib_->SetStream(handle_, ctx.stream), "cudnnSetStream");
    if (!init_status_ && handle_ != nullptr) {
      lib_->Destroy(handle_);
      handle_ = nullptr;
    }
    return init_status_;
  }
  static Result<void*> grow(void** p, size_t* have, size_t bytes) {
    if (bytes <= *have && *p != nullptr) return *p;
    if (*p != nullptr) cudaFree(*p);
    *p = nullptr;
    *have = 0;
    PARTRAIN_CUDA_RETURN_IF_ERROR(cudaMalloc(p, bytes > 0 ? bytes : 1));
    *have = bytes;
    return *p;
  }

  const CudnnLib* lib_ = nullptr;
  cudnnHandle_t handle_ = nullptr;
  Status init_status_;
  std::vector<std::unique_ptr<SdpaGraph>> graphs_;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  void* softmax_sum_ = nullptr;
  size_t softmax_sum_bytes_ = 0;
};

CudnnAttention* cudnn_attention_create() { return new CudnnAttention(); }

Status cudnn_sdpa_describe(int B, int T, int H, int KV, int hd, int q_stride, int kv_stride, bool backward,
                           int* num_ops) {
  Result<const CudnnLib*> lib = CudnnLib::get();
  if (!lib) return lib.status();
  SdpaGraph sg;
  sg.key = SdpaKey{B, T, H, KV, hd, q_stride, kv_stride, backward};
  for (MaskStyle style : {MaskStyle::kFloatIndex, MaskStyle::kIntIndex}) {
    sg.g = std::make_unique<CudnnGraph>(**lib);
    if (backward) {
      build_backward(sg, **lib, style);
    } else {
      build_forward(sg, **lib, style);
    }
    PARTRAIN_RETURN_IF_ERROR(sg.g->status());
  }
  *num_ops = static_cast<int>(sg.g->num_ops());
  return Status::ok();
}
void cudnn_attention_destroy(CudnnAttention* a) { delete a; }

namespace {
Status check_cudnn_shape(const Context& ctx, int H, int KV, int hd, std::initializer_list<const void*> ptrs) {
  if (!ctx.opt.cudnn_attention) return Status::unavailable("the cudnn path is off (PARTRAIN_CUDA_PATHS)");
  if (ctx.cudnn == nullptr) return Status::unavailable("no cuDNN attention object in this context");
  if (KV <= 0 || H % KV != 0) return Status::invalid("attention: heads must be a multiple of kv_heads");
  if (hd % 8 != 0 || hd > 128) return Status::unavailable("cuDNN SDPA needs a head dim that is a multiple of 8, at most 128");
  for (const void* p : ptrs) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return Status::unavailable("cuDNN SDPA needs 16-byte aligned q/k/v");
  }
  return Status::ok();
}
}  // namespace

template <>
Status attention_forward_cudnn<bf16>(const Context& ctx, bf16* out, float* lse, const bf16* q, const bf16* k,
                                     const bf16* v, int B, int T, int H, int KV, int hd, int q_stride,
                                     int kv_stride) {
  PARTRAIN_RETURN_IF_ERROR(check_cudnn_shape(ctx, H, KV, hd, {out, q, k, v}));
  Result<SdpaGraph*> sg = ctx.cudnn->graph(ctx, SdpaKey{B, T, H, KV, hd, q_stride, kv_stride, false});
  if (!sg) return sg.status();
  const SdpaGraph& G = **sg;
  Result<void*> ws = ctx.cudnn->workspace(static_cast<size_t>(G.g->workspace_bytes()));
  if (!ws) return ws.status();
  return G.g->execute(ctx.cudnn->handle(),
                      {{G.q, const_cast<bf16*>(q)}, {G.k, const_cast<bf16*>(k)}, {G.v, const_cast<bf16*>(v)},
                       {G.o, out}, {G.stats, lse}},
                      *ws);
}

template <>
Status attention_backward_cudnn<bf16>(const Context& ctx, bf16* dq, bf16* dk, bf16* dv, const bf16* dout,
                                      const bf16* out, const float* lse, const bf16* q, const bf16* k,
                                      const bf16* v, int B, int T, int H, int KV, int hd, int q_stride,
                                      int kv_stride) {
  PARTRAIN_RETURN_IF_ERROR(check_cudnn_shape(ctx, H, KV, hd, {dq, dk, dv, dout, out, q, k, v}));
  if (dq == nullptr || dk == nullptr || dv == nullptr) return Status::unavailable("cuDNN SDPA backward writes dq, dk and dv");
  Result<SdpaGraph*> sg = ctx.cudnn->graph(ctx, SdpaKey{B, T, H, KV, hd, q_stride, kv_stride, true});
  if (!sg) return sg.status();
  const SdpaGraph& G = **sg;
  Result<void*> ws = ctx.cudnn->workspace(static_cast<size_t>(G.g->workspace_bytes()));
  if (!ws) return ws.status();
  Result<void*> sum = ctx.cudnn->softmax_sum(static_cast<size_t>(B) * H * T * sizeof(float));
  if (!sum) return sum.status();
  return G.g->execute(ctx.cudnn->handle(),
                      {{G.q, const_cast<bf16*>(q)}, {G.k, const_cast<bf16*>(k)}, {G.v, const_cast<bf16*>(v)},
                       {G.o, const_cast<bf16*>(out)}, {G.dout, const_cast<bf16*>(dout)},
                       {G.stats, const_cast<float*>(lse)}, {G.dq, dq}, {G.dk, dk}, {G.dv, dv},
                       {G.softmax_sum, *sum}},
                      *ws);
}

#else  // no cuDNN headers at build time

class CudnnAttention {};
CudnnAttention* cudnn_attention_create() { return nullptr; }
Status cudnn_sdpa_describe(int, int, int, int, int, int, int, bool, int*) {
  return Status::unavailable("built without cuDNN's headers (cudnn_graph.h)");
}
void cudnn_attention_destroy(CudnnAttention*) {}

template <>
Status attention_forward_cudnn<bf16>(const Context&, bf16*, float*, const bf16*, const bf16*, const bf16*, int,
                                     int, int, int, int, int, int) {
  return Status::unavailable("built without cuDNN's headers (cudnn_graph.h): the cudnn attention path is absent");
}
template <>
Status attention_backward_cudnn<bf16>(const Context&, bf16*, bf16*, bf16*, const bf16*, const bf16*,
                                      const float*, const bf16*, const bf16*, const bf16*, int, int, int, int,
                                      int, int, int) {
  return Status::unavailable("built without cuDNN's headers (cudnn_graph.h): the cudnn attention path is absent");
}

#endif

// fp32 storage: cuDNN's SDPA takes half precision only.
template <>
Status attention_forward_cudnn<float>(const Context&, float*, float*, const float*, const float*, const float*,
                                      int, int, int, int, int, int, int) {
  return Status::unavailable("cuDNN SDPA takes bf16 only; fp32 storage uses partrain's attention");
}
template <>
Status attention_backward_cudnn<float>(const Context&, float*, float*, float*, const float*, const float*,
                                       const float*, const float*, const float*, const float*, int, int, int,
                                       int, int, int, int) {
  return Status::unavailable("cuDNN SDPA takes bf16 only; fp32 storage uses partrain's attention");
}

}  // namespace partrain::engine::cuda
