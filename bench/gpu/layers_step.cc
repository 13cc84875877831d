// KernelGpt2: see layers_step.h. Parameters live in one flat bf16 buffer (with fp32 master,
// moments and gradients alongside, same layout; every tensor 128-byte aligned), activations
// in one buffer per kind per layer, all from cudaMalloc.
#include "layers_step.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "engine/cuda/cuda_status.h"
#include "engine/cuda/nvtx.h"

namespace partrain::bench {

namespace cu = engine::cuda;
using cu::bf16;

namespace {
// Per-layer parameter tensors, in buffer order.
enum LayerParam { kLn1W, kLn1B, kQkvW, kQkvB, kAttW, kAttB, kLn2W, kLn2B, kFcW, kFcB, kProjW, kProjB, kNumLayerParams };
constexpr float kLr = 3e-4f, kBeta1 = 0.9f, kBeta2 = 0.95f, kEps = 1e-8f, kDecay = 0.1f, kClip = 1.0f;
}  // namespace

struct KernelGpt2::Impl {
  Gpt2Shape s;
  LayerStepOptions o;
  int B = 0, N = 0;
  cu::Context ctx;
  cu::PhaseTimer timer;
  std::vector<void*> allocations;
  std::vector<void*> pinned;
  // Parameters: offsets into the flat buffers.
  size_t wte = 0, wpe = 0, lnfw = 0, lnfb = 0, total = 0;
  std::vector<size_t> layer_off;  // [L * kNumLayerParams]
  bf16* p16 = nullptr;
  float *master = nullptr, *m = nullptr, *v = nullptr, *grad = nullptr;
  // Optimizer state on the device: step counter, scalars, segment table, sum of squares.
  int64_t* t_dev = nullptr;
  cu::AdamWScalars* scalars = nullptr;
  cu::AdamWSegment* segments = nullptr;
  double* norm = nullptr;
  int64_t t_host = 0;
  // Activations.
  int32_t *tokens = nullptr, *targets = nullptr, *tokens_h = nullptr, *targets_h = nullptr;
  std::vector<bf16*> res;  // L+1 residual streams [N, C]
  struct Layer {
    bf16 *ln1, *qkv, *att, *attproj, *res2, *ln2, *fch, *fch_gelu, *fcproj;
    float *mean1, *rstd1, *mean2, *rstd2, *lse;
  };
  std::vector<Layer> acts;
  bf16 *lnf = nullptr, *logits = nullptr;
  float *lnf_mean = nullptr, *lnf_rstd = nullptr, *losses = nullptr;
  bf16 *dres = nullptr, *dln = nullptr, *dqkv = nullptr, *datt = nullptr, *dfch = nullptr,
       *dfch_gelu = nullptr;
  void* attn_ws = nullptr;
  float* delta = nullptr;  // flash attention's backward scratch
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t graph_exec = nullptr;

  template <typename T>
  Status alloc(T** p, size_t n) {
    void* raw = nullptr;
    PARTRAIN_CUDA_RETURN_IF_ERROR(cudaMalloc(&raw, n * sizeof(T) + 256));
    allocations.push_back(raw);
    PARTRAIN_CUDA_RETURN_IF_ERROR(cudaMemset(raw, 0, n * sizeof(T)));
    *p = static_cast<T*>(raw);
    return Status::ok();
  }
  bf16* P(int l, LayerParam k) const { return p16 + layer_off[static_cast<size_t>(l) * kNumLayerParams + k]; }
  float* G(int l, LayerParam k) const { return grad + layer_off[static_cast<size_t>(l) * kNumLayerParams + k]; }
  Status zero(void* p, size_t bytes) const {
    return cu::cuda_status(cudaMemsetAsync(p, 0, bytes, ctx.stream), "cudaMemsetAsync");
  }
  void mark(const char* phase) { timer.mark(phase); }
};

namespace {

// GPT-2's initialisation: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)), norms w=1 b=0.
std::vector<float> init_params(const Gpt2Shape& shape, size_t total, size_t wte,
                               size_t wpe, size_t lnfw, const std::vector<size_t>& layer_off, const size_t* sizes,
                               uint64_t seed) {
  const size_t C = static_cast<size_t>(shape.channels);
  const int L = shape.layers;
  std::vector<float> host(total, 0.0f);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  auto normal = [&](size_t at, size_t n, float std) {
    std::normal_distribution<float> d(0.0f, std);
    for (size_t i = 0; i < n; ++i) host[at + i] = d(rng);
  };
  normal(wte, static_cast<size_t>(shape.vocab) * C, 0.02f);  // padding rows stay 0
  normal(wpe, static_cast<size_t>(shape.seq) * C, 0.01f);
  for (int l = 0; l < L; ++l) {
    auto o = [&](int k) { return layer_off[static_cast<size_t>(l) * kNumLayerParams + k]; };
    for (size_t i = 0; i < C; ++i) host[o(kLn1W) + i] = host[o(kLn2W) + i] = 1.0f;
    normal(o(kQkvW), sizes[kQkvW], 0.02f);
    normal(o(kAttW), sizes[kAttW], 0.02f / std::sqrt(2.0f * L));
    normal(o(kFcW), sizes[kFcW], 0.02f);
    normal(o(kProjW), sizes[kProjW], 0.02f / std::sqrt(2.0f * L));
  }
  for (size_t i = 0; i < C; ++i) host[lnfw + i] = 1.0f;
  return host;
}

}  // namespace

Result<std::unique_ptr<KernelGpt2>> KernelGpt2::create(const Gpt2Shape& shape, int batch, uint64_t seed,
                                                       const LayerStepOptions& options) {
  if (options.attention != "auto" && options.attention != "cudnn" && options.attention != "gemm" &&
      options.attention != "flash") {
    return Status::invalid("attention '" + options.attention + "': expected auto, cudnn, gemm or flash");
  }
  std::unique_ptr<KernelGpt2> g(new KernelGpt2());
  g->impl_ = std::make_unique<Impl>();
  Impl& I = *g->impl_;
  I.s = shape;
  I.o = options;
  I.B = batch;
  I.N = batch * shape.seq;
  const size_t C = static_cast<size_t>(shape.channels), N = static_cast<size_t>(I.N);
  const int L = shape.layers;
  PARTRAIN_RETURN_IF_ERROR(cu::context_create(&I.ctx, 0));
  I.ctx.opt = options.paths;
  I.timer.set_stream(I.ctx.stream);

  // Parameter layout.
  size_t off = 0;
  auto take = [&](size_t n) {
    const size_t at = off;
    off += (n + 63) / 64 * 64;  // keep every tensor 128-byte aligned in bf16
    return at;
  };
  I.wte = take(static_cast<size_t>(shape.padded_vocab) * C);
  I.wpe = take(static_cast<size_t>(shape.seq) * C);
  const size_t sizes[kNumLayerParams] = {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C};
  for (int l = 0; l < L; ++l)
    for (int k = 0; k < kNumLayerParams; ++k) I.layer_off.push_back(take(sizes[k]));
  I.lnfw = take(C);
  I.lnfb = take(C);
  I.total = off;
  const std::vector<float> host = init_params(shape, I.total, I.wte, I.wpe, I.lnfw, I.layer_off, sizes, seed);

  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.p16, I.total));
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.master, I.total));
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.m, I.total));
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.v, I.total));
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.grad, I.total));
  PARTRAIN_CUDA_RETURN_IF_ERROR(cudaMemcpy(I.master, host.data(), I.total * 4, cudaMemcpyHostToDevice));
  PARTRAIN_RETURN_IF_ERROR((cu::convert<float, bf16>(I.ctx, I.p16, I.master, I.total)));
  // One decay for every tensor, as the previous benchmark's single adamw_update.
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.segments, 1));
  const cu::AdamWSegment seg{0, static_cast<int64_t>(I.total), kDecay, 0};
  PARTRAIN_CUDA_RETURN_IF_ERROR(cudaMemcpy(I.segments, &seg, sizeof(seg), cudaMemcpyHostToDevice));
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.scalars, 1));
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.t_dev, 1));
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.norm, 1));

  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.tokens, N));
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.targets, N));
  for (int32_t** h : {&I.tokens_h, &I.targets_h}) {
    PARTRAIN_CUDA_RETURN_IF_ERROR(cudaMallocHost(reinterpret_cast<void**>(h), N * sizeof(int32_t)));
    I.pinned.push_back(*h);
  }
  I.res.resize(static_cast<size_t>(L) + 1);
  for (auto& r : I.res) PARTRAIN_RETURN_IF_ERROR(I.alloc(&r, N * C));
  I.acts.resize(static_cast<size_t>(L));
  for (auto& a : I.acts) {
    for (bf16** p : {&a.ln1, &a.att, &a.attproj, &a.res2, &a.ln2, &a.fcproj}) PARTRAIN_RETURN_IF_ERROR(I.alloc(p, N * C));
    PARTRAIN_RETURN_IF_ERROR(I.alloc(&a.qkv, N * 3 * C));
    PARTRAIN_RETURN_IF_ERROR(I.alloc(&a.fch, N * 4 * C));
    PARTRAIN_RETURN_IF_ERROR(I.alloc(&a.fch_gelu, N * 4 * C));
    for (float** p : {&a.mean1, &a.rstd1, &a.mean2, &a.rstd2}) PARTRAIN_RETURN_IF_ERROR(I.alloc(p, N));
    PARTRAIN_RETURN_IF_ERROR(I.alloc(&a.lse, N * shape.heads));
  }
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.lnf, N * C));
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.lnf_mean, N));
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.lnf_rstd, N));
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.logits, N * shape.padded_vocab));
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.losses, N));
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.dres, N * C));
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.dln, N * C));
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.dqkv, N * 3 * C));
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.datt, N * C));
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.dfch, N * 4 * C));
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.dfch_gelu, N * 4 * C));
  const int hd = static_cast<int>(C) / shape.heads;
  if (options.attention == "auto") {
    // cuDNN if both its graphs build and run here (on the zeroed buffers), else the GEMM path.
    const int Ci = static_cast<int>(C), H = shape.heads, T = shape.seq;
    auto& a = I.acts[0];
    Status s = cu::attention_forward_cudnn<bf16>(I.ctx, a.att, a.lse, a.qkv, a.qkv + Ci, a.qkv + 2 * Ci, batch, T, H, H, hd,
                                                 3 * Ci, 3 * Ci);
    if (s) {
      s = cu::attention_backward_cudnn<bf16>(I.ctx, I.dqkv, I.dqkv + Ci, I.dqkv + 2 * Ci, I.datt, a.att, a.lse, a.qkv,
                                             a.qkv + Ci, a.qkv + 2 * Ci, batch, T, H, H, hd, 3 * Ci, 3 * Ci);
    }
    if (s) s = cu::cuda_status(cudaStreamSynchronize(I.ctx.stream), "cuDNN attention probe");
    if (!s && s.code() != StatusCode::kUnavailable) return s;
    I.o.attention = s ? "cudnn" : "gemm";
    g->attention_note_ = s ? "cudnn" : "gemm (cuDNN: " + s.message() + ")";
  } else {
    g->attention_note_ = options.attention;
  }
  if (I.o.attention == "gemm") {
    char* ws = nullptr;
    PARTRAIN_RETURN_IF_ERROR(I.alloc(&ws, cu::attention_workspace_bytes<bf16>(batch, shape.seq, shape.heads, shape.heads, hd)));
    I.attn_ws = ws;
  }
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.delta, cu::attention_flash_workspace_bytes(batch, shape.seq, shape.heads) / 4));
  PARTRAIN_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return g;
}

KernelGpt2::~KernelGpt2() {
  if (!impl_) return;
  cudaDeviceSynchronize();
  if (impl_->graph_exec) cudaGraphExecDestroy(impl_->graph_exec);
  if (impl_->graph) cudaGraphDestroy(impl_->graph);
  for (void* p : impl_->allocations) cudaFree(p);
  for (void* p : impl_->pinned) cudaFreeHost(p);
  cu::context_destroy(&impl_->ctx);
}

int64_t KernelGpt2::num_params_no_pos() const {
  const Gpt2Shape& s = impl_->s;
  const int64_t C = s.channels;
  return static_cast<int64_t>(s.vocab) * C + s.layers * (12 * C * C + 13 * C) + 2 * C;
}

Status KernelGpt2::synchronize() {
  return cu::cuda_status(cudaStreamSynchronize(impl_->ctx.stream), "synchronize");
}

cu::PhaseTimer& KernelGpt2::phases() { return impl_->timer; }

bool KernelGpt2::graph_captured() const { return impl_->graph_exec != nullptr; }

Status KernelGpt2::set_batch(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets) {
  Impl& I = *impl_;
  const size_t N = static_cast<size_t>(I.N);
  if (tokens.size() != N || targets.size() != N) return Status::invalid("set_batch: expected B*T tokens");
  PARTRAIN_RETURN_IF_ERROR(synchronize());  // no copy in flight reads the pinned buffers
  std::copy(tokens.begin(), tokens.end(), I.tokens_h);
  std::copy(targets.begin(), targets.end(), I.targets_h);
  return Status::ok();
}

Status KernelGpt2::forward() {
  Impl& I = *impl_;
  cu::NvtxRange range("forward");
  const int B = I.B, T = I.s.seq, C = I.s.channels, H = I.s.heads, N = I.N, hd = C / H, L = I.s.layers;
  const auto& ctx = I.ctx;
  const size_t NC = static_cast<size_t>(N) * C;
  I.mark("fwd.embed");
  PARTRAIN_RETURN_IF_ERROR(cu::embedding_forward<bf16>(ctx, I.res[0], I.tokens, I.p16 + I.wte, I.p16 + I.wpe, B, T, C));
  I.mark("fwd.norm");
  auto& a0 = I.acts[0];
  PARTRAIN_RETURN_IF_ERROR(cu::layernorm_forward<bf16>(ctx, a0.ln1, a0.mean1, a0.rstd1, I.res[0], I.P(0, kLn1W), I.P(0, kLn1B), N, C, 1e-5f));
  for (int l = 0; l < L; ++l) {
    auto& a = I.acts[static_cast<size_t>(l)];
    bf16* x = I.res[static_cast<size_t>(l)];
    I.mark("fwd.matmul");
    PARTRAIN_RETURN_IF_ERROR(cu::matmul_forward<bf16>(ctx, a.qkv, a.ln1, I.P(l, kQkvW), I.P(l, kQkvB), N, C, 3 * C));
    I.mark("fwd.attention");
    if (I.o.attention == "cudnn") {
      PARTRAIN_RETURN_IF_ERROR(cu::attention_forward_cudnn<bf16>(ctx, a.att, a.lse, a.qkv, a.qkv + C, a.qkv + 2 * C, B, T, H, H, hd, 3 * C, 3 * C));
    } else if (I.o.attention == "flash") {
      PARTRAIN_RETURN_IF_ERROR(cu::attention_forward_flash<bf16>(ctx, a.att, a.lse, a.qkv, a.qkv + C, a.qkv + 2 * C, B, T, H, H, hd, 3 * C, 3 * C));
    } else {
      PARTRAIN_RETURN_IF_ERROR(cu::attention_forward<bf16>(ctx, a.att, a.lse, a.qkv, a.qkv + C, a.qkv + 2 * C, B, T, H, H, hd, 3 * C, 3 * C, I.attn_ws));
    }
    I.mark("fwd.matmul");
    PARTRAIN_RETURN_IF_ERROR(cu::matmul_forward<bf16>(ctx, a.attproj, a.att, I.P(l, kAttW), I.P(l, kAttB), N, C, C));
    I.mark("fwd.residual+norm");
    PARTRAIN_RETURN_IF_ERROR(cu::residual_layernorm_forward<bf16>(ctx, a.res2, a.ln2, a.mean2, a.rstd2, x, a.attproj, I.P(l, kLn2W), I.P(l, kLn2B), N, C, 1e-5f));
    I.mark("fwd.matmul+gelu");
    PARTRAIN_RETURN_IF_ERROR(cu::matmul_forward_gelu<bf16>(ctx, a.fch_gelu, a.fch, a.ln2, I.P(l, kFcW), I.P(l, kFcB), N, C, 4 * C));
    I.mark("fwd.matmul");
    PARTRAIN_RETURN_IF_ERROR(cu::matmul_forward<bf16>(ctx, a.fcproj, a.fch_gelu, I.P(l, kProjW), I.P(l, kProjB), N, 4 * C, C));
    // The next block's (or the final) LayerNorm of res[l+1] = res2 + fcproj.
    I.mark("fwd.residual+norm");
    const bool last = l + 1 == L;
    auto& n = I.acts[static_cast<size_t>(last ? l : l + 1)];
    PARTRAIN_RETURN_IF_ERROR(cu::residual_layernorm_forward<bf16>(
        ctx, I.res[static_cast<size_t>(l) + 1], last ? I.lnf : n.ln1, last ? I.lnf_mean : n.mean1, last ? I.lnf_rstd : n.rstd1,
        a.res2, a.fcproj, last ? I.p16 + I.lnfw : I.P(l + 1, kLn1W), last ? I.p16 + I.lnfb : I.P(l + 1, kLn1B), N, C, 1e-5f));
  }
  (void)NC;
  I.mark("fwd.head");
  PARTRAIN_RETURN_IF_ERROR(cu::matmul_forward<bf16>(ctx, I.logits, I.lnf, I.p16 + I.wte, nullptr, N, C, I.s.padded_vocab));
  // Loss and, in place, dlogits of the mean loss.
  I.mark("fwd.loss");
  return cu::crossentropy_fused<bf16>(ctx, I.losses, I.logits, I.targets, 1.0f / N, N, I.s.vocab, I.s.padded_vocab);
}

Status KernelGpt2::backward() {
  Impl& I = *impl_;
  cu::NvtxRange range("backward");
  const int B = I.B, T = I.s.seq, C = I.s.channels, H = I.s.heads, N = I.N, hd = C / H;
  const auto& ctx = I.ctx;
  const size_t NC = static_cast<size_t>(N) * C;
  const bool ow = I.o.overwrite;
  // A GEMM's input gradient: written (overwrite) or zeroed then accumulated (previous path).
  auto linear = [&](bf16* dinp, float* dw, float* db, const bf16* dout, const bf16* inp, const bf16* w, int Cin, int OC) -> Status {
    cu::LinearGrads<bf16> g;
    g.dinp = dinp, g.dw = dw, g.dbias = db, g.dinp_overwrite = ow;
    if (!ow && dinp != nullptr) PARTRAIN_RETURN_IF_ERROR(I.zero(dinp, static_cast<size_t>(N) * Cin * 2));
    return cu::matmul_backward_ex<bf16>(ctx, g, dout, inp, w, N, Cin, OC);
  };
  I.mark("bwd.zero");
  PARTRAIN_RETURN_IF_ERROR(I.zero(I.grad, I.total * 4));
  PARTRAIN_RETURN_IF_ERROR(I.zero(I.dres, NC * 2));
  I.mark("bwd.head");
  PARTRAIN_RETURN_IF_ERROR(linear(I.dln, I.grad + I.wte, nullptr, I.logits, I.lnf, I.p16 + I.wte, C, I.s.padded_vocab));
  I.mark("bwd.norm");
  PARTRAIN_RETURN_IF_ERROR(cu::layernorm_backward<bf16>(ctx, I.dres, I.grad + I.lnfw, I.grad + I.lnfb, I.dln, I.res.back(), I.p16 + I.lnfw, I.lnf_mean, I.lnf_rstd, N, C));
  for (int l = I.s.layers - 1; l >= 0; --l) {
    auto& a = I.acts[static_cast<size_t>(l)];
    bf16* x = I.res[static_cast<size_t>(l)];
    // MLP branch: dres is d(res[l+1]) = d(res2) = d(fcproj).
    if (ow) {  // dfch = gelu'(fch) * (dres @ Wproj): the dGELU epilogue (or its in-place fallback)
      I.mark("bwd.matmul+gelu");
      cu::LinearGrads<bf16> g;
      g.dinp = I.dfch, g.gelu_pre = a.fch, g.dw = I.G(l, kProjW), g.dbias = I.G(l, kProjB);
      PARTRAIN_RETURN_IF_ERROR(cu::matmul_backward_ex<bf16>(ctx, g, I.dres, a.fch_gelu, I.P(l, kProjW), N, 4 * C, C));
    } else {
      I.mark("bwd.matmul");
      PARTRAIN_RETURN_IF_ERROR(linear(I.dfch_gelu, I.G(l, kProjW), I.G(l, kProjB), I.dres, a.fch_gelu, I.P(l, kProjW), 4 * C, C));
      I.mark("bwd.gelu");
      PARTRAIN_RETURN_IF_ERROR(I.zero(I.dfch, NC * 4 * 2));
      PARTRAIN_RETURN_IF_ERROR(cu::gelu_backward<bf16>(ctx, I.dfch, a.fch, I.dfch_gelu, NC * 4));
    }
    I.mark("bwd.matmul");
    PARTRAIN_RETURN_IF_ERROR(linear(I.dln, I.G(l, kFcW), I.G(l, kFcB), I.dfch, a.ln2, I.P(l, kFcW), C, 4 * C));
    I.mark("bwd.norm");
    PARTRAIN_RETURN_IF_ERROR(cu::layernorm_backward<bf16>(ctx, I.dres, I.G(l, kLn2W), I.G(l, kLn2B), I.dln, a.res2, I.P(l, kLn2W), a.mean2, a.rstd2, N, C));
    // Attention branch: dres is now d(res2) = d(x) + d(attproj).
    I.mark("bwd.matmul");
    PARTRAIN_RETURN_IF_ERROR(linear(I.datt, I.G(l, kAttW), I.G(l, kAttB), I.dres, a.att, I.P(l, kAttW), C, C));
    I.mark("bwd.attention");
    if (I.o.attention == "cudnn") {  // writes dq, dk, dv
      PARTRAIN_RETURN_IF_ERROR(cu::attention_backward_cudnn<bf16>(ctx, I.dqkv, I.dqkv + C, I.dqkv + 2 * C, I.datt, a.att, a.lse, a.qkv, a.qkv + C, a.qkv + 2 * C, B, T, H, H, hd, 3 * C, 3 * C));
    } else {
      PARTRAIN_RETURN_IF_ERROR(I.zero(I.dqkv, NC * 3 * 2));
      if (I.o.attention == "flash") {
        PARTRAIN_RETURN_IF_ERROR(cu::attention_backward_flash<bf16>(ctx, I.dqkv, I.dqkv + C, I.dqkv + 2 * C, I.datt, a.att, a.lse, a.qkv, a.qkv + C, a.qkv + 2 * C, B, T, H, H, hd, 3 * C, 3 * C, I.delta));
      } else {
        PARTRAIN_RETURN_IF_ERROR(cu::attention_backward<bf16>(ctx, I.dqkv, I.dqkv + C, I.dqkv + 2 * C, I.datt, a.att, a.lse, a.qkv, a.qkv + C, a.qkv + 2 * C, B, T, H, H, hd, 3 * C, 3 * C, I.attn_ws));
      }
    }
    I.mark("bwd.matmul");
    PARTRAIN_RETURN_IF_ERROR(linear(I.dln, I.G(l, kQkvW), I.G(l, kQkvB), I.dqkv, a.ln1, I.P(l, kQkvW), C, 3 * C));
    I.mark("bwd.norm");
    PARTRAIN_RETURN_IF_ERROR(cu::layernorm_backward<bf16>(ctx, I.dres, I.G(l, kLn1W), I.G(l, kLn1B), I.dln, x, I.P(l, kLn1W), a.mean1, a.rstd1, N, C));
  }
  I.mark("bwd.embed");
  return cu::embedding_backward<bf16>(ctx, I.grad + I.wte, I.grad + I.wpe, I.dres, I.tokens, B, T, C);
}

// Global norm, clip factor, AdamW. Device optimizer with the multi-tensor AdamW: all of it
// on the device. Otherwise the previous path: the norm read on the host, one adamw_update.
Status KernelGpt2::optimizer() {
  Impl& I = *impl_;
  cu::NvtxRange range("optimizer");
  const auto& ctx = I.ctx;
  I.mark("opt.norm");
  PARTRAIN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(I.norm, 0, sizeof(double), ctx.stream));
  PARTRAIN_RETURN_IF_ERROR(cu::sum_squares<float>(ctx, I.norm, I.grad, I.total));
  I.mark("opt.adamw");
  if (I.o.device_optimizer && ctx.opt.multi_adamw) {
    PARTRAIN_RETURN_IF_ERROR(cu::adamw_advance(ctx, I.scalars, I.t_dev, kLr, kBeta1, kBeta2, kEps));
    PARTRAIN_RETURN_IF_ERROR(cu::adamw_clip_scale(ctx, I.scalars, I.norm, kClip, 1.0f));
    return cu::adamw_multi(ctx, I.master, I.m, I.v, I.grad, I.p16, I.total, I.segments, 1, I.scalars);
  }
  double sumsq = 0.0;
  PARTRAIN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&sumsq, I.norm, sizeof(double), cudaMemcpyDeviceToHost, ctx.stream));
  PARTRAIN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(ctx.stream));
  const float norm = static_cast<float>(std::sqrt(sumsq));
  const float clip = norm > kClip ? kClip / (norm + 1e-6f) : 1.0f;
  ++I.t_host;
  return cu::adamw_update(ctx, I.master, I.m, I.v, I.grad, I.p16, I.total, kLr, kBeta1, kBeta2, kEps, kDecay, I.t_host, clip);
}

Status KernelGpt2::step() {
  Impl& I = *impl_;
  if (I.graph_exec != nullptr) {
    return cu::cuda_status(cudaGraphLaunch(I.graph_exec, I.ctx.stream), "cudaGraphLaunch");
  }
  const size_t N = static_cast<size_t>(I.N);
  PARTRAIN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(I.tokens, I.tokens_h, N * 4, cudaMemcpyHostToDevice, I.ctx.stream));
  PARTRAIN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(I.targets, I.targets_h, N * 4, cudaMemcpyHostToDevice, I.ctx.stream));
  PARTRAIN_RETURN_IF_ERROR(forward());
  PARTRAIN_RETURN_IF_ERROR(backward());
  return optimizer();
}

Status KernelGpt2::capture_graph() {
  Impl& I = *impl_;
  if (!I.o.device_optimizer || !I.ctx.opt.multi_adamw) {
    return Status::invalid("a CUDA graph needs the device optimizer (no host read of the norm mid-step)");
  }
  if (I.timer.enabled()) return Status::invalid("phase timing and graph capture do not mix");
  PARTRAIN_RETURN_IF_ERROR(synchronize());
  PARTRAIN_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(I.ctx.stream, cudaStreamCaptureModeThreadLocal));
  const Status s = step();
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(I.ctx.stream, &graph);
  if (!s || end != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
    return !s ? s.prefixed("while capturing: ") : cu::cuda_status(end, "cudaStreamEndCapture");
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  if (inst != cudaSuccess) {
    cudaGraphDestroy(graph);
    return cu::cuda_status(inst, "cudaGraphInstantiate");
  }
  I.graph = graph;
  I.graph_exec = exec;
  // The captured step did not run: run it now, as step() would have.
  return step();
}

Result<float> KernelGpt2::last_loss() {
  Impl& I = *impl_;
  const size_t N = static_cast<size_t>(I.N);
  std::vector<float> losses(N);
  PARTRAIN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(losses.data(), I.losses, N * 4, cudaMemcpyDeviceToHost, I.ctx.stream));
  PARTRAIN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(I.ctx.stream));
  double sum = 0.0;
  for (float x : losses) sum += x;
  return static_cast<float>(sum / static_cast<double>(N));
}

}  // namespace partrain::bench
