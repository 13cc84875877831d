// The CUDA backend through the Backend interface, against the CPU backend: host<->device
// conversion, per-category memory accounting, dtype conversion in copy(), a GPT-style
// sequence of ops (LayerNorm -> packed qkv matmul -> attention -> output matmul, forward and
// backward), sum_squares and an AdamW step on fp32 master weights. Tolerances as in
// kernels_test.cc (bf16 storage: ~1e-2 of a tensor's scale per rounding stage).
#include <cmath>
#include <cstdlib>
#include <string>
#include <memory>
#include <vector>

#include "engine/backend.h"
#include "engine/cuda/cuda_backend.h"
#include "gpu_test.h"
#include "gpu_util.h"

namespace partrain::gputest {
namespace {

using engine::AttentionDims;
using engine::Backend;
using engine::DType;
using engine::MemCategory;
using engine::Shape;
using engine::Tensor;

// A tensor on `be` holding `host` (converted to `dtype`).
Tensor make(Backend& be, MemCategory cat, DType dtype, Shape shape, const std::vector<float>& host) {
  auto t = be.alloc(cat, dtype, shape);
  if (!t) return Tensor{};
  be.to_device(*t, host.data());
  return *t;
}

std::vector<float> host(Backend& be, const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  be.to_host(out.data(), t);
  return out;
}

TEST(CudaBackend, MemoryAndConversions) {
  PARTRAIN_REQUIRE_GPU();
  auto r = engine::make_cuda_backend(0, engine::DType::kBF16);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  Backend& be = **r;
  EXPECT_TRUE(be.param_dtype() == DType::kBF16 && be.grad_dtype() == DType::kF32 &&
              be.act_dtype() == DType::kBF16);
  auto x = randn(1000, 1);
  auto a = be.alloc(MemCategory::kActivations, DType::kBF16, Shape{10, 100});
  auto w = be.alloc(MemCategory::kWeights, DType::kF32, Shape{1000});
  ASSERT_TRUE(a.is_ok() && w.is_ok());
  EXPECT_EQ(be.memory().live[static_cast<size_t>(MemCategory::kActivations)], 2000u);
  EXPECT_EQ(be.memory().live[static_cast<size_t>(MemCategory::kWeights)], 4000u);
  EXPECT_TRUE(host(be, *a) == std::vector<float>(1000, 0.0f)) << "alloc zero-fills";
  be.to_device(*a, x.data());
  EXPECT_TRUE(host(be, *a) == rounded<bf16>(x)) << "bf16 storage rounds to nearest even";
  be.copy(*w, *a);  // bf16 -> f32 converts
  EXPECT_TRUE(host(be, *w) == rounded<bf16>(x)) << "copy converts bf16 to f32";
  be.scale(*w, 2.0f);
  be.accumulate(*w, *a);  // w = 2 x + x
  auto three = rounded<bf16>(x);
  for (float& v : three) v *= 3.0f;
  EXPECT_LE(rel_err(host(be, *w), three), 1e-7);
  const double ss = be.sum_squares(*w);
  double want = 0.0;
  for (float v : three) want += static_cast<double>(v) * v;
  EXPECT_LE(std::fabs(ss - want) / want, 1e-9);
  Tensor at = *a;
  be.release(&at);
  EXPECT_EQ(be.memory().live[static_cast<size_t>(MemCategory::kActivations)], 0u);
  EXPECT_EQ(be.memory().peak[static_cast<size_t>(MemCategory::kActivations)], 2000u);
  auto* cb = dynamic_cast<engine::cuda::CudaBackend*>(&be);
  ASSERT_TRUE(cb != nullptr);
  EXPECT_TRUE(cb->status().is_ok()) << cb->status().message();
  // A wrong dtype is an error that sticks, not a crash.
  auto bad = be.alloc(MemCategory::kActivations, DType::kBF16, Shape{1000});
  ASSERT_TRUE(bad.is_ok());
  be.matmul_backward(*bad, *bad, Tensor{}, *bad, *bad, *bad, 10, 10, 100);  // dw must be f32
  EXPECT_FALSE(cb->status().is_ok()) << "bf16 weight gradient must be refused";
}

// One attention block's ops on both backends from the same (bf16-rounded) inputs, with the
// CUDA backend's attention path chosen by PARTRAIN_CUDA_ATTENTION.
void check_attention_block(const char* attention_mode) {
  setenv("PARTRAIN_CUDA_ATTENTION", attention_mode, 1);
  auto rg = engine::make_cuda_backend(0, engine::DType::kBF16);
  unsetenv("PARTRAIN_CUDA_ATTENTION");
  ASSERT_TRUE(rg.is_ok()) << rg.status().message();
  auto cpu = engine::make_cpu_backend();
  const int B = 2, T = 24, C = 64, H = 4, KV = 2, hd = C / H, QKV = (H + 2 * KV) * hd;
  const int N = B * T;
  auto x = rounded<bf16>(randn(static_cast<size_t>(N) * C, 10));
  auto lnw = rounded<bf16>(randn(C, 11, 0.1f, 1.0f)), lnb = rounded<bf16>(randn(C, 12, 0.1f));
  auto wqkv = rounded<bf16>(randn(static_cast<size_t>(QKV) * C, 13, 0.1f));
  auto wo = rounded<bf16>(randn(static_cast<size_t>(C) * H * hd, 14, 0.1f));
  auto dy = rounded<bf16>(randn(static_cast<size_t>(N) * C, 15));

  struct Run {
    std::vector<float> y, dx, dwqkv, dwo, dlnw;
  };
  auto run = [&](Backend& be) {
    const DType act = be.act_dtype(), par = be.param_dtype(), grad = be.grad_dtype();
    const auto A = MemCategory::kActivations, W = MemCategory::kWeights, G = MemCategory::kGrads;
    Tensor tx = make(be, A, act, Shape{N, C}, x), tw = make(be, W, par, Shape{C}, lnw),
           tb = make(be, W, par, Shape{C}, lnb), tq = make(be, W, par, Shape{QKV, C}, wqkv),
           to = make(be, W, par, Shape{C, H * hd}, wo), tdy = make(be, A, act, Shape{N, C}, dy);
    Tensor ln = *be.alloc(A, act, Shape{N, C}), mean = *be.alloc(A, DType::kF32, Shape{N}),
           rstd = *be.alloc(A, DType::kF32, Shape{N}), qkv = *be.alloc(A, act, Shape{N, QKV}),
           att = *be.alloc(A, act, Shape{N, H * hd}), lse = *be.alloc(A, DType::kF32, Shape{B, H, T}),
           y = *be.alloc(A, act, Shape{N, C});
    be.layernorm_forward(ln, mean, rstd, tx, tw, tb, N, C, 1e-5f);
    be.matmul_forward(qkv, ln, tq, Tensor{}, N, C, QKV);
    AttentionDims d{B, T, H, KV, hd, QKV, QKV};
    Tensor q = qkv, k = qkv.slice(H * hd, qkv.shape), v = qkv.slice((H + KV) * hd, qkv.shape);
    be.attention_forward(att, lse, q, k, v, d);
    be.matmul_forward(y, att, to, Tensor{}, N, H * hd, C);
    Tensor datt = *be.alloc(A, act, Shape{N, H * hd}), dqkv = *be.alloc(A, act, Shape{N, QKV}),
           dln = *be.alloc(A, act, Shape{N, C}), dx = *be.alloc(A, act, Shape{N, C}),
           gq = *be.alloc(G, grad, Shape{QKV, C}), go = *be.alloc(G, grad, Shape{C, H * hd}),
           gw = *be.alloc(G, grad, Shape{C}), gb = *be.alloc(G, grad, Shape{C});
    be.matmul_backward(datt, go, Tensor{}, tdy, att, to, N, H * hd, C);
    be.attention_backward(dqkv, dqkv.slice(H * hd, dqkv.shape), dqkv.slice((H + KV) * hd, dqkv.shape),
                          datt, att, lse, q, k, v, d);
    be.matmul_backward(dln, gq, Tensor{}, dqkv, ln, tq, N, C, QKV);
    be.layernorm_backward(dx, gw, gb, dln, tx, tw, mean, rstd, N, C);
    return Run{host(be, y), host(be, dx), host(be, gq), host(be, go), host(be, gw)};
  };
  const Run g = run(**rg), c = run(*cpu);
  auto* cb = dynamic_cast<engine::cuda::CudaBackend*>(rg->get());
  EXPECT_TRUE(cb->status().is_ok()) << cb->status().message();
  // Five bf16 stages deep (LN, qkv GEMM, softmax P, PV GEMM, output GEMM): 3e-2 forward,
  // 5e-2 for gradients that pass back through all of them.
  EXPECT_LE(rel_err(g.y, c.y), 3e-2) << "block output";
  EXPECT_LE(rel_err(g.dwo, c.dwo), 3e-2) << "d w_o";
  EXPECT_LE(rel_err(g.dwqkv, c.dwqkv), 5e-2) << "d w_qkv";
  EXPECT_LE(rel_err(g.dlnw, c.dlnw), 5e-2) << "d ln weight";
  EXPECT_LE(rel_err(g.dx, c.dx), 5e-2) << "dx";
}

TEST(CudaBackend, AttentionBlockMatchesCpu) {
  PARTRAIN_REQUIRE_GPU();
  check_attention_block("gemm");
}

TEST(CudaBackend, AttentionBlockFlashMatchesCpu) {
  PARTRAIN_REQUIRE_GPU();
  check_attention_block("flash");
}

// cuDNN's fused SDPA under the Backend contract (its gradients added, not written).
TEST(CudaBackend, AttentionBlockCudnnMatchesCpu) {
  PARTRAIN_REQUIRE_GPU();
  check_attention_block("cudnn");
}

TEST(CudaBackend, BadAttentionModeIsRefused) {
  PARTRAIN_REQUIRE_GPU();
  setenv("PARTRAIN_CUDA_ATTENTION", "fastest", 1);
  auto rg = engine::make_cuda_backend(0, engine::DType::kBF16);
  unsetenv("PARTRAIN_CUDA_ATTENTION");
  ASSERT_FALSE(rg.is_ok());
  EXPECT_TRUE(rg.status().message().find("PARTRAIN_CUDA_ATTENTION") != std::string::npos)
      << rg.status().message();
}

// The fused ops (residual + norm, GELU's GEMMs, multi-range AdamW) against the CPU
// backend's, which run the plain ops in sequence (engine/backend.cc).
TEST(CudaBackend, FusedOpsMatchCpu) {
  PARTRAIN_REQUIRE_GPU();
  auto rg = engine::make_cuda_backend(0, engine::DType::kBF16);
  ASSERT_TRUE(rg.is_ok()) << rg.status().message();
  auto cpu = engine::make_cpu_backend();
  const int N = 64, C = 96, F = 256;
  auto a = rounded<bf16>(randn(static_cast<size_t>(N) * C, 30)), b = rounded<bf16>(randn(static_cast<size_t>(N) * C, 31));
  auto w = rounded<bf16>(randn(C, 32, 0.1f, 1.0f)), bias = rounded<bf16>(randn(C, 33, 0.1f));
  auto wfc = rounded<bf16>(randn(static_cast<size_t>(F) * C, 34, 0.1f)), bfc = rounded<bf16>(randn(F, 35, 0.1f));
  auto wpr = rounded<bf16>(randn(static_cast<size_t>(C) * F, 36, 0.1f));
  auto dy = rounded<bf16>(randn(static_cast<size_t>(N) * C, 37));
  struct Run {
    std::vector<float> res, ln, rms, h, dpre, dw, db;
  };
  auto run = [&](Backend& be) {
    const DType act = be.act_dtype(), par = be.param_dtype();
    const auto A = MemCategory::kActivations, W = MemCategory::kWeights, G = MemCategory::kGrads;
    Tensor ta = make(be, A, act, Shape{N, C}, a), tb = make(be, A, act, Shape{N, C}, b),
           tw = make(be, W, par, Shape{C}, w), tbias = make(be, W, par, Shape{C}, bias),
           tfc = make(be, W, par, Shape{F, C}, wfc), tbfc = make(be, W, par, Shape{F}, bfc),
           tpr = make(be, W, par, Shape{C, F}, wpr), tdy = make(be, A, act, Shape{N, C}, dy);
    Tensor res = *be.alloc(A, act, Shape{N, C}), ln = *be.alloc(A, act, Shape{N, C}), rms = *be.alloc(A, act, Shape{N, C}),
           mean = *be.alloc(A, DType::kF32, Shape{N}), rstd = *be.alloc(A, DType::kF32, Shape{N}),
           pre = *be.alloc(A, act, Shape{N, F}), h = *be.alloc(A, act, Shape{N, F}), dpre = *be.alloc(A, act, Shape{N, F}),
           scratch = *be.alloc(A, act, Shape{N, F}), dw = *be.alloc(G, DType::kF32, Shape{C, F}),
           db = *be.alloc(G, DType::kF32, Shape{C});
    be.residual_layernorm_forward(res, ln, mean, rstd, ta, tb, tw, tbias, N, C, 1e-5f);
    be.residual_rmsnorm_forward(res, rms, rstd, ta, tb, tw, N, C, 1e-5f);
    be.matmul_gelu_forward(h, pre, ln, tfc, tbfc, N, C, F);
    be.fill(dpre, 3.0f);  // written, not accumulated
    be.matmul_gelu_backward(dpre, dw, db, tdy, h, tpr, pre, scratch, N, F, C);
    return Run{host(be, res), host(be, ln), host(be, rms), host(be, h), host(be, dpre), host(be, dw), host(be, db)};
  };
  const Run g = run(**rg), c = run(*cpu);
  auto* cb = dynamic_cast<engine::cuda::CudaBackend*>(rg->get());
  EXPECT_TRUE(cb->status().is_ok()) << cb->status().message();
  EXPECT_LE(rel_err(g.res, c.res), 4e-3) << "residual";
  EXPECT_LE(rel_err(g.ln, c.ln), 1e-2) << "layernorm";
  EXPECT_LE(rel_err(g.rms, c.rms), 1e-2) << "rmsnorm";
  EXPECT_LE(rel_err(g.h, c.h), 2e-2) << "gelu(fc)";
  EXPECT_LE(rel_err(g.dpre, c.dpre), 3e-2) << "d pre-activation";
  EXPECT_LE(rel_err(g.dw, c.dw), 3e-2) << "d w";
  EXPECT_LE(rel_err(g.db, c.db), 3e-2) << "d bias";

  // AdamW over three ranges with their own decay, against the CPU's per-range adamw.
  const int n = 5000;
  const std::vector<Backend::AdamWRange> ranges = {{0, 1000, 0.1f}, {1000, 1003, 0.0f}, {1003, n, 0.1f}};
  auto p = rounded<bf16>(randn(n, 40)), gr = randn(n, 41, 0.01f);
  Tensor param = make(**rg, MemCategory::kWeights, DType::kBF16, Shape{n}, p);
  Tensor master = make(**rg, MemCategory::kOptimizer, DType::kF32, Shape{n}, p);
  Tensor m = *(*rg)->alloc(MemCategory::kOptimizer, DType::kF32, Shape{n});
  Tensor v = *(*rg)->alloc(MemCategory::kOptimizer, DType::kF32, Shape{n});
  Tensor grad = make(**rg, MemCategory::kGrads, DType::kF32, Shape{n}, gr);
  Tensor cp = make(*cpu, MemCategory::kWeights, DType::kF32, Shape{n}, p);
  Tensor cm = *cpu->alloc(MemCategory::kOptimizer, DType::kF32, Shape{n});
  Tensor cv = *cpu->alloc(MemCategory::kOptimizer, DType::kF32, Shape{n});
  Tensor cg = make(*cpu, MemCategory::kGrads, DType::kF32, Shape{n}, gr);
  engine::AdamWArgs args;
  args.lr = 1e-2f;
  args.grad_scale = 0.7f;
  for (int64_t t = 1; t <= 2; ++t) {
    args.t = t;
    (*rg)->adamw_multi(param, master, m, v, grad, ranges, args);
    cpu->adamw_multi(cp, Tensor{}, cm, cv, cg, ranges, args);
  }
  EXPECT_TRUE(cb->status().is_ok()) << cb->status().message();
  EXPECT_LE(rel_err(host(**rg, master), host(*cpu, cp)), 1e-6) << "multi-range AdamW";
  EXPECT_TRUE(host(**rg, param) == rounded<bf16>(host(**rg, master))) << "bf16 copy = rounded master";
}

TEST(CudaBackend, AdamWOnMasterWeights) {
  PARTRAIN_REQUIRE_GPU();
  auto rg = engine::make_cuda_backend(0, engine::DType::kBF16);
  ASSERT_TRUE(rg.is_ok()) << rg.status().message();
  Backend& be = **rg;
  auto cpu = engine::make_cpu_backend();
  const int n = 4099;
  auto p = rounded<bf16>(randn(n, 20)), g = randn(n, 21, 0.01f);
  Tensor param = make(be, MemCategory::kWeights, DType::kBF16, Shape{n}, p);
  Tensor master = make(be, MemCategory::kOptimizer, DType::kF32, Shape{n}, p);
  Tensor m = *be.alloc(MemCategory::kOptimizer, DType::kF32, Shape{n});
  Tensor v = *be.alloc(MemCategory::kOptimizer, DType::kF32, Shape{n});
  Tensor grad = make(be, MemCategory::kGrads, DType::kF32, Shape{n}, g);
  Tensor cp = make(*cpu, MemCategory::kWeights, DType::kF32, Shape{n}, p);
  Tensor cm = *cpu->alloc(MemCategory::kOptimizer, DType::kF32, Shape{n});
  Tensor cv = *cpu->alloc(MemCategory::kOptimizer, DType::kF32, Shape{n});
  Tensor cg = make(*cpu, MemCategory::kGrads, DType::kF32, Shape{n}, g);
  engine::AdamWArgs a;
  a.lr = 1e-2f;
  a.weight_decay = 0.1f;
  for (int64_t t = 1; t <= 3; ++t) {
    a.t = t;
    be.adamw(param, master, m, v, grad, a);
    cpu->adamw(cp, Tensor{}, cm, cv, cg, a);
  }
  const auto want = host(*cpu, cp);
  EXPECT_LE(rel_err(host(be, master), want), 1e-6) << "fp32 master follows the CPU update";
  EXPECT_TRUE(host(be, param) == rounded<bf16>(host(be, master))) << "bf16 copy = rounded master";
}

}  // namespace
}  // namespace partrain::gputest
