// KernelGpt2: see layers_step.h. Parameters live in one flat bf16 buffer (with fp32 master,
// moments and gradients alongside, same layout), activations in one buffer per kind per
// layer, all from cudaMalloc.
#include "layers_step.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <random>
#include <string>

#include "engine/cuda/cuda_status.h"

namespace partrain::bench {

namespace cu = engine::cuda;
using cu::bf16;

namespace {
// Per-layer parameter tensors, in buffer order.
enum LayerParam { kLn1W, kLn1B, kQkvW, kQkvB, kAttW, kAttB, kLn2W, kLn2B, kFcW, kFcB, kProjW, kProjB, kNumLayerParams };
}  // namespace

struct KernelGpt2::Impl {
  Gpt2Shape s;
  int B = 0, N = 0;
  cu::Context ctx;
  std::vector<void*> allocations;
  // Parameters: offsets into the flat buffers.
  size_t wte = 0, wpe = 0, lnfw = 0, lnfb = 0, total = 0;
  std::vector<size_t> layer_off;  // [L * kNumLayerParams]
  bf16* p16 = nullptr;
  float *master = nullptr, *m = nullptr, *v = nullptr, *grad = nullptr;
  // Activations.
  int32_t *tokens = nullptr, *targets = nullptr;
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
  double* norm = nullptr;

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
};

Result<std::unique_ptr<KernelGpt2>> KernelGpt2::create(const Gpt2Shape& shape, int batch, uint64_t seed) {
  std::unique_ptr<KernelGpt2> g(new KernelGpt2());
  g->impl_ = std::make_unique<Impl>();
  Impl& I = *g->impl_;
  I.s = shape;
  I.B = batch;
  I.N = batch * shape.seq;
  const size_t C = static_cast<size_t>(shape.channels), N = static_cast<size_t>(I.N);
  const int L = shape.layers;
  PARTRAIN_RETURN_IF_ERROR(cu::context_create(&I.ctx, 0));

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

  // Init (GPT-2's): N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)), norms w=1 b=0.
  std::vector<float> host(I.total, 0.0f);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  auto normal = [&](size_t at, size_t n, float std) {
    std::normal_distribution<float> d(0.0f, std);
    for (size_t i = 0; i < n; ++i) host[at + i] = d(rng);
  };
  normal(I.wte, static_cast<size_t>(shape.vocab) * C, 0.02f);  // padding rows stay 0
  normal(I.wpe, static_cast<size_t>(shape.seq) * C, 0.01f);
  for (int l = 0; l < L; ++l) {
    auto o = [&](int k) { return I.layer_off[static_cast<size_t>(l) * kNumLayerParams + k]; };
    for (size_t i = 0; i < C; ++i) host[o(kLn1W) + i] = host[o(kLn2W) + i] = 1.0f;
    normal(o(kQkvW), sizes[kQkvW], 0.02f);
    normal(o(kAttW), sizes[kAttW], 0.02f / std::sqrt(2.0f * L));
    normal(o(kFcW), sizes[kFcW], 0.02f);
    normal(o(kProjW), sizes[kProjW], 0.02f / std::sqrt(2.0f * L));
  }
  for (size_t i = 0; i < C; ++i) host[I.lnfw + i] = 1.0f;

  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.p16, I.total));
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.master, I.total));
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.m, I.total));
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.v, I.total));
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.grad, I.total));
  PARTRAIN_CUDA_RETURN_IF_ERROR(cudaMemcpy(I.master, host.data(), I.total * 4, cudaMemcpyHostToDevice));
  PARTRAIN_RETURN_IF_ERROR((cu::convert<float, bf16>(I.ctx, I.p16, I.master, I.total)));

  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.tokens, N));
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.targets, N));
  I.res.resize(static_cast<size_t>(L) + 1);
  for (auto& r : I.res) PARTRAIN_RETURN_IF_ERROR(I.alloc(&r, N * C));
  I.acts.resize(static_cast<size_t>(L));
  for (auto& a : I.acts) {
    PARTRAIN_RETURN_IF_ERROR(I.alloc(&a.ln1, N * C));
    PARTRAIN_RETURN_IF_ERROR(I.alloc(&a.qkv, N * 3 * C));
    PARTRAIN_RETURN_IF_ERROR(I.alloc(&a.att, N * C));
    PARTRAIN_RETURN_IF_ERROR(I.alloc(&a.attproj, N * C));
    PARTRAIN_RETURN_IF_ERROR(I.alloc(&a.res2, N * C));
    PARTRAIN_RETURN_IF_ERROR(I.alloc(&a.ln2, N * C));
    PARTRAIN_RETURN_IF_ERROR(I.alloc(&a.fch, N * 4 * C));
    PARTRAIN_RETURN_IF_ERROR(I.alloc(&a.fch_gelu, N * 4 * C));
    PARTRAIN_RETURN_IF_ERROR(I.alloc(&a.fcproj, N * C));
    PARTRAIN_RETURN_IF_ERROR(I.alloc(&a.mean1, N));
    PARTRAIN_RETURN_IF_ERROR(I.alloc(&a.rstd1, N));
    PARTRAIN_RETURN_IF_ERROR(I.alloc(&a.mean2, N));
    PARTRAIN_RETURN_IF_ERROR(I.alloc(&a.rstd2, N));
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
  char* ws = nullptr;
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&ws, cu::attention_workspace_bytes<bf16>(batch, shape.seq, shape.heads, shape.heads, static_cast<int>(C) / shape.heads)));
  I.attn_ws = ws;
  PARTRAIN_RETURN_IF_ERROR(I.alloc(&I.norm, 1));
  return g;
}

KernelGpt2::~KernelGpt2() {
  if (!impl_) return;
  cudaDeviceSynchronize();
  for (void* p : impl_->allocations) cudaFree(p);
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

Status KernelGpt2::forward() {
  Impl& I = *impl_;
  const int B = I.B, T = I.s.seq, C = I.s.channels, H = I.s.heads, N = I.N, hd = C / H;
  const auto& ctx = I.ctx;
  PARTRAIN_RETURN_IF_ERROR(cu::embedding_forward<bf16>(ctx, I.res[0], I.tokens, I.p16 + I.wte, I.p16 + I.wpe, B, T, C));
  for (int l = 0; l < I.s.layers; ++l) {
    auto& a = I.acts[static_cast<size_t>(l)];
    bf16* x = I.res[static_cast<size_t>(l)];
    PARTRAIN_RETURN_IF_ERROR(cu::layernorm_forward<bf16>(ctx, a.ln1, a.mean1, a.rstd1, x, I.P(l, kLn1W), I.P(l, kLn1B), N, C, 1e-5f));
    PARTRAIN_RETURN_IF_ERROR(cu::matmul_forward<bf16>(ctx, a.qkv, a.ln1, I.P(l, kQkvW), I.P(l, kQkvB), N, C, 3 * C));
    PARTRAIN_RETURN_IF_ERROR(cu::attention_forward<bf16>(ctx, a.att, a.lse, a.qkv, a.qkv + C, a.qkv + 2 * C, B, T, H, H, hd, 3 * C, 3 * C, I.attn_ws));
    PARTRAIN_RETURN_IF_ERROR(cu::matmul_forward<bf16>(ctx, a.attproj, a.att, I.P(l, kAttW), I.P(l, kAttB), N, C, C));
    PARTRAIN_RETURN_IF_ERROR(cu::residual_forward<bf16>(ctx, a.res2, x, a.attproj, static_cast<size_t>(N) * C));
    PARTRAIN_RETURN_IF_ERROR(cu::layernorm_forward<bf16>(ctx, a.ln2, a.mean2, a.rstd2, a.res2, I.P(l, kLn2W), I.P(l, kLn2B), N, C, 1e-5f));
    PARTRAIN_RETURN_IF_ERROR(cu::matmul_forward<bf16>(ctx, a.fch, a.ln2, I.P(l, kFcW), I.P(l, kFcB), N, C, 4 * C));
    PARTRAIN_RETURN_IF_ERROR(cu::gelu_forward<bf16>(ctx, a.fch_gelu, a.fch, static_cast<size_t>(N) * 4 * C));
    PARTRAIN_RETURN_IF_ERROR(cu::matmul_forward<bf16>(ctx, a.fcproj, a.fch_gelu, I.P(l, kProjW), I.P(l, kProjB), N, 4 * C, C));
    PARTRAIN_RETURN_IF_ERROR(cu::residual_forward<bf16>(ctx, I.res[static_cast<size_t>(l) + 1], a.res2, a.fcproj, static_cast<size_t>(N) * C));
  }
  PARTRAIN_RETURN_IF_ERROR(cu::layernorm_forward<bf16>(ctx, I.lnf, I.lnf_mean, I.lnf_rstd, I.res.back(), I.p16 + I.lnfw, I.p16 + I.lnfb, N, C, 1e-5f));
  PARTRAIN_RETURN_IF_ERROR(cu::matmul_forward<bf16>(ctx, I.logits, I.lnf, I.p16 + I.wte, nullptr, N, C, I.s.padded_vocab));
  // Loss and, in place, dlogits of the mean loss.
  return cu::crossentropy_fused<bf16>(ctx, I.losses, I.logits, I.targets, 1.0f / N, N, I.s.vocab, I.s.padded_vocab);
}

Status KernelGpt2::backward() {
  Impl& I = *impl_;
  const int B = I.B, T = I.s.seq, C = I.s.channels, H = I.s.heads, N = I.N, hd = C / H;
  const auto& ctx = I.ctx;
  const size_t NC = static_cast<size_t>(N) * C;
  auto zero = [&](void* p, size_t bytes) {
    return cu::cuda_status(cudaMemsetAsync(p, 0, bytes, ctx.stream), "cudaMemsetAsync");
  };
  PARTRAIN_RETURN_IF_ERROR(zero(I.grad, I.total * 4));
  PARTRAIN_RETURN_IF_ERROR(zero(I.dln, NC * 2));
  PARTRAIN_RETURN_IF_ERROR(zero(I.dres, NC * 2));
  PARTRAIN_RETURN_IF_ERROR(cu::matmul_backward<bf16>(ctx, I.dln, I.grad + I.wte, nullptr, I.logits, I.lnf, I.p16 + I.wte, N, C, I.s.padded_vocab));
  PARTRAIN_RETURN_IF_ERROR(cu::layernorm_backward<bf16>(ctx, I.dres, I.grad + I.lnfw, I.grad + I.lnfb, I.dln, I.res.back(), I.p16 + I.lnfw, I.lnf_mean, I.lnf_rstd, N, C));
  for (int l = I.s.layers - 1; l >= 0; --l) {
    auto& a = I.acts[static_cast<size_t>(l)];
    bf16* x = I.res[static_cast<size_t>(l)];
    // MLP branch: dres is d(res[l+1]) = d(res2) = d(fcproj).
    PARTRAIN_RETURN_IF_ERROR(zero(I.dfch_gelu, NC * 4 * 2));
    PARTRAIN_RETURN_IF_ERROR(cu::matmul_backward<bf16>(ctx, I.dfch_gelu, I.G(l, kProjW), I.G(l, kProjB), I.dres, a.fch_gelu, I.P(l, kProjW), N, 4 * C, C));
    PARTRAIN_RETURN_IF_ERROR(zero(I.dfch, NC * 4 * 2));
    PARTRAIN_RETURN_IF_ERROR(cu::gelu_backward<bf16>(ctx, I.dfch, a.fch, I.dfch_gelu, NC * 4));
    PARTRAIN_RETURN_IF_ERROR(zero(I.dln, NC * 2));
    PARTRAIN_RETURN_IF_ERROR(cu::matmul_backward<bf16>(ctx, I.dln, I.G(l, kFcW), I.G(l, kFcB), I.dfch, a.ln2, I.P(l, kFcW), N, C, 4 * C));
    PARTRAIN_RETURN_IF_ERROR(cu::layernorm_backward<bf16>(ctx, I.dres, I.G(l, kLn2W), I.G(l, kLn2B), I.dln, a.res2, I.P(l, kLn2W), a.mean2, a.rstd2, N, C));
    // Attention branch: dres is now d(res2) = d(x) + d(attproj).
    PARTRAIN_RETURN_IF_ERROR(zero(I.datt, NC * 2));
    PARTRAIN_RETURN_IF_ERROR(cu::matmul_backward<bf16>(ctx, I.datt, I.G(l, kAttW), I.G(l, kAttB), I.dres, a.att, I.P(l, kAttW), N, C, C));
    PARTRAIN_RETURN_IF_ERROR(zero(I.dqkv, NC * 3 * 2));
    PARTRAIN_RETURN_IF_ERROR(cu::attention_backward<bf16>(ctx, I.dqkv, I.dqkv + C, I.dqkv + 2 * C, I.datt, a.att, a.lse, a.qkv, a.qkv + C, a.qkv + 2 * C, B, T, H, H, hd, 3 * C, 3 * C, I.attn_ws));
    PARTRAIN_RETURN_IF_ERROR(zero(I.dln, NC * 2));
    PARTRAIN_RETURN_IF_ERROR(cu::matmul_backward<bf16>(ctx, I.dln, I.G(l, kQkvW), I.G(l, kQkvB), I.dqkv, a.ln1, I.P(l, kQkvW), N, C, 3 * C));
    PARTRAIN_RETURN_IF_ERROR(cu::layernorm_backward<bf16>(ctx, I.dres, I.G(l, kLn1W), I.G(l, kLn1B), I.dln, x, I.P(l, kLn1W), a.mean1, a.rstd1, N, C));
  }
  return cu::embedding_backward<bf16>(ctx, I.grad + I.wte, I.grad + I.wpe, I.dres, I.tokens, B, T, C);
}

Result<float> KernelGpt2::step(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets,
                               float lr, int64_t t) {
  Impl& I = *impl_;
  const size_t N = static_cast<size_t>(I.N);
  PARTRAIN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(I.tokens, tokens.data(), N * 4, cudaMemcpyHostToDevice, I.ctx.stream));
  PARTRAIN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(I.targets, targets.data(), N * 4, cudaMemcpyHostToDevice, I.ctx.stream));
  PARTRAIN_RETURN_IF_ERROR(forward());
  PARTRAIN_RETURN_IF_ERROR(backward());
  // Global norm (one host read per step, as every trainer with clipping does).
  PARTRAIN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(I.norm, 0, sizeof(double), I.ctx.stream));
  PARTRAIN_RETURN_IF_ERROR(cu::sum_squares<float>(I.ctx, I.norm, I.grad, I.total));
  double sumsq = 0.0;
  PARTRAIN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&sumsq, I.norm, sizeof(double), cudaMemcpyDeviceToHost, I.ctx.stream));
  PARTRAIN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(I.ctx.stream));
  const float norm = static_cast<float>(std::sqrt(sumsq));
  const float clip = norm > 1.0f ? 1.0f / (norm + 1e-6f) : 1.0f;
  PARTRAIN_RETURN_IF_ERROR(cu::adamw_update(I.ctx, I.master, I.m, I.v, I.grad, I.p16, I.total, lr, 0.9f, 0.95f, 1e-8f, 0.1f, t, clip));
  std::vector<float> losses(N);
  PARTRAIN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(losses.data(), I.losses, N * 4, cudaMemcpyDeviceToHost, I.ctx.stream));
  PARTRAIN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(I.ctx.stream));
  double sum = 0.0;
  for (float x : losses) sum += x;
  return static_cast<float>(sum / static_cast<double>(N));
}

}  // namespace partrain::bench
