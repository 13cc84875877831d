// The fast paths of KernelOptions (PARTRAIN_CUDA_PATHS) against the CPU reference, each run
// with the path on and off (the previous path, its fallback), so a broken fast path fails
// here by name: cached cuBLASLt plans (a second call with other pointers must use them),
// the GELU / dGELU / BGRADB epilogues and the overwrite modes, fused residual + norm
// forward, the one-pass norm backward (also bit-identical twice), 128-bit pointwise kernels
// (and their scalar fallback on a misaligned view), the multi-tensor AdamW (against
// adamw_update per tensor) with the clip factor set on the device.
// Tolerances as kernels_test.cc: fp32 1e-5 of the tensor's scale, bf16 1e-2 per rounding.
// The option parser needs no GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/cpu/kernels.h"
#include "gpu_test.h"
#include "gpu_util.h"

namespace partrain::gputest {
namespace {

namespace cpu = engine::cpu;
namespace cu = engine::cuda;

// A kernel context with the fast paths of `paths` ("all", "none", "lt,epilogue", ...).
struct Ctx {
  cu::Context ctx;
  Status status;
  explicit Ctx(const char* paths) {
    status = cu::context_create(&ctx, 0);
    if (status) status = cu::parse_kernel_paths(paths, &ctx.opt);
  }
  ~Ctx() { cu::context_destroy(&ctx); }
};
#define PARTRAIN_CTX(c, paths) \
  Ctx c(paths);                \
  ASSERT_TRUE(c.status.is_ok()) << c.status.message()

TEST(CudaFastPaths, ParsePathsNeedsNoGpu) {
  cu::KernelOptions o;
  ASSERT_TRUE(cu::parse_kernel_paths("none", &o).is_ok());
  EXPECT_FALSE(o.lt_cache || o.epilogues || o.fused_norm || o.vector_io || o.multi_adamw || o.cudnn_attention);
  ASSERT_TRUE(cu::parse_kernel_paths("lt,norm", &o).is_ok());
  EXPECT_TRUE(o.lt_cache && o.fused_norm && !o.epilogues && !o.vector_io && !o.cudnn_attention);
  char buf[128];
  EXPECT_EQ(std::string(cu::kernel_paths_name(o, buf, sizeof(buf))), "lt,norm");
  ASSERT_TRUE(cu::parse_kernel_paths("", &o).is_ok());
  EXPECT_EQ(std::string(cu::kernel_paths_name(o, buf, sizeof(buf))), "lt,epilogue,norm,vec,adamw,cudnn");
  const Status bad = cu::parse_kernel_paths("lt,fastest", &o);
  EXPECT_FALSE(bad.is_ok());
  EXPECT_TRUE(bad.message().find("fastest") != std::string::npos) << bad.message();
}

// Forward and backward of one linear layer (+ GELU), twice with different buffers, under
// `paths`, against the CPU.
template <typename A>
void check_linear(const char* paths) {
  PARTRAIN_CTX(c, paths);
  const int N = 80, C = 64, OC = 96;
  for (int round = 0; round < 2; ++round) {  // round 1 reuses the cached plans with new pointers
    const uint32_t seed = 100 + 10 * static_cast<uint32_t>(round);
    auto x = rounded<A>(randn(static_cast<size_t>(N) * C, seed));
    auto w = rounded<A>(randn(static_cast<size_t>(OC) * C, seed + 1, 0.1f));
    auto bias = rounded<A>(randn(OC, seed + 2));
    std::vector<float> pre(static_cast<size_t>(N) * OC), act(pre.size());
    cpu::matmul_forward(pre.data(), x.data(), w.data(), bias.data(), N, C, OC);
    cpu::gelu_forward(act.data(), pre.data(), pre.size());
    Dev<A> dx(x), dw(w), dbias(bias), dpre(pre.size()), dact(pre.size()), dplain(pre.size());
    ASSERT_TRUE(cu::matmul_forward<A>(c.ctx, dplain.get(), dx.get(), dw.get(), dbias.get(), N, C, OC).is_ok());
    EXPECT_LE(rel_err(dplain.download(), pre), tol<A>(1e-5, 1e-2)) << paths << " matmul forward";
    ASSERT_TRUE(cu::matmul_forward_gelu<A>(c.ctx, dact.get(), dpre.get(), dx.get(), dw.get(), dbias.get(), N, C, OC)
                    .is_ok());
    EXPECT_LE(rel_err(dpre.download(), pre), tol<A>(1e-5, 1e-2)) << paths << " gelu pre-activation";
    EXPECT_LE(rel_err(dact.download(), act), tol<A>(1e-4, 1.5e-2)) << paths << " gelu output";

    // Backward through GELU: dpre = gelu'(pre) * (dy @ w2) for a second layer w2 [OC2, OC].
    const int OC2 = 48;
    auto w2 = rounded<A>(randn(static_cast<size_t>(OC2) * OC, seed + 3, 0.1f));
    auto dy = rounded<A>(randn(static_cast<size_t>(N) * OC2, seed + 4));
    std::vector<float> dh(pre.size(), 0.0f), dpre_want(pre.size(), 0.0f);
    auto gw2 = randn(w2.size(), seed + 5), gb2 = randn(OC2, seed + 6);
    auto pre_r = rounded<A>(pre), act_r = rounded<A>(act);  // what the GPU stored
    cpu::matmul_backward(dh.data(), gw2.data(), gb2.data(), dy.data(), act_r.data(), w2.data(), N, OC, OC2);
    cpu::gelu_backward(dpre_want.data(), pre_r.data(), rounded<A>(dh).data(), pre.size());
    Dev<A> dw2(w2), ddy(dy), dpre_r(pre_r), dact_r(act_r);
    Dev<A> ddpre(randn(pre.size(), seed + 7));  // overwritten: start from garbage
    Dev<float> dgw2(randn(w2.size(), seed + 5)), dgb2(randn(OC2, seed + 6));
    cu::LinearGrads<A> g;
    g.dinp = ddpre.get();
    g.gelu_pre = dpre_r.get();
    g.dw = dgw2.get();
    g.dbias = dgb2.get();
    ASSERT_TRUE(cu::matmul_backward_ex<A>(c.ctx, g, ddy.get(), dact_r.get(), dw2.get(), N, OC, OC2).is_ok());
    EXPECT_LE(rel_err(ddpre.download(), dpre_want), tol<A>(1e-4, 2e-2)) << paths << " dgelu";
    EXPECT_LE(rel_err(dgw2.download(), gw2), 1e-5) << paths << " dw (+=)";
    EXPECT_LE(rel_err(dgb2.download(), gb2), 1e-5) << paths << " dbias (+=)";

    // Overwrite modes: dinp = dy @ w2, dw = dy^T act, from garbage.
    std::vector<float> dinp_want(pre.size(), 0.0f), dw_want(w2.size(), 0.0f);
    cpu::matmul_backward(dinp_want.data(), dw_want.data(), nullptr, dy.data(), act_r.data(), w2.data(), N, OC, OC2);
    Dev<A> ddinp(randn(pre.size(), seed + 8));
    Dev<float> ddw(randn(w2.size(), seed + 9));
    cu::LinearGrads<A> o;
    o.dinp = ddinp.get();
    o.dinp_overwrite = true;
    o.dw = ddw.get();
    o.dw_overwrite = true;
    ASSERT_TRUE(cu::matmul_backward_ex<A>(c.ctx, o, ddy.get(), dact_r.get(), dw2.get(), N, OC, OC2).is_ok());
    EXPECT_LE(rel_err(ddinp.download(), dinp_want), tol<A>(1e-5, 1e-2)) << paths << " dinp (=)";
    EXPECT_LE(rel_err(ddw.download(), dw_want), 1e-5) << paths << " dw (=)";
  }
  EXPECT_EQ(device_error(), "");
}
TEST(CudaFastPaths, LinearF32AllPaths) { PARTRAIN_REQUIRE_GPU(); check_linear<float>("all"); }
TEST(CudaFastPaths, LinearBF16AllPaths) { PARTRAIN_REQUIRE_GPU(); check_linear<bf16>("all"); }
TEST(CudaFastPaths, LinearBF16LtOnly) { PARTRAIN_REQUIRE_GPU(); check_linear<bf16>("lt"); }
TEST(CudaFastPaths, LinearBF16NoFastPath) { PARTRAIN_REQUIRE_GPU(); check_linear<bf16>("none"); }

// res = a + b, then LayerNorm / RMSNorm; backward with the weight gradients.
template <typename A>
void check_residual_norm(const char* paths, bool rms, int C) {
  PARTRAIN_CTX(c, paths);
  const int N = 1000;  // several blocks of the fused backward
  const size_t n = static_cast<size_t>(N) * C;
  auto a = rounded<A>(randn(n, 40, 1.5f, 0.3f)), b = rounded<A>(randn(n, 41));
  auto w = rounded<A>(randn(C, 42, 0.3f, 1.0f)), bias = rounded<A>(randn(C, 43, 0.3f));
  std::vector<float> res(n), out(n), mean(N), rstd(N);
  cpu::residual_forward(res.data(), a.data(), b.data(), n);
  res = rounded<A>(res);
  if (rms) {
    cpu::rmsnorm_forward(out.data(), rstd.data(), res.data(), w.data(), N, C, 1e-5f);
  } else {
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), res.data(), w.data(), bias.data(), N, C, 1e-5f);
  }
  Dev<A> da(a), db(b), dw(w), dbias(bias), dres(n), dout(n);
  Dev<float> dmean(N), drstd(N);
  const Status s = rms ? cu::residual_rmsnorm_forward<A>(c.ctx, dres.get(), dout.get(), drstd.get(), da.get(),
                                                         db.get(), dw.get(), N, C, 1e-5f)
                       : cu::residual_layernorm_forward<A>(c.ctx, dres.get(), dout.get(), dmean.get(), drstd.get(),
                                                           da.get(), db.get(), dw.get(), dbias.get(), N, C, 1e-5f);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_LE(rel_err(dres.download(), res), tol<A>(1e-6, 4e-3)) << paths << " residual";
  EXPECT_LE(rel_err(dout.download(), out), tol<A>(1e-5, 1e-2)) << paths << " norm";
  EXPECT_LE(rel_err(drstd.download(), rstd), 1e-5) << paths << " rstd";

  auto dy = rounded<A>(randn(n, 44));
  auto gx = rounded<A>(randn(n, 45)), gw = randn(C, 46), gb = randn(C, 47);
  std::vector<std::vector<float>> got_gw;
  for (int run = 0; run < 2; ++run) {
    Dev<A> ddy(dy), dgx(gx);
    Dev<float> dgw(gw), dgb(gb);
    const Status bs = rms ? cu::rmsnorm_backward<A>(c.ctx, dgx.get(), dgw.get(), ddy.get(), dres.get(), dw.get(),
                                                    drstd.get(), N, C)
                          : cu::layernorm_backward<A>(c.ctx, dgx.get(), dgw.get(), dgb.get(), ddy.get(), dres.get(),
                                                      dw.get(), dmean.get(), drstd.get(), N, C);
    ASSERT_TRUE(bs.is_ok()) << bs.message();
    got_gw.push_back(dgw.download());
    if (run == 1) continue;
    auto want_gx = gx, want_gw = gw, want_gb = gb;
    if (rms) {
      cpu::rmsnorm_backward(want_gx.data(), want_gw.data(), dy.data(), res.data(), w.data(), rstd.data(), N, C);
    } else {
      cpu::layernorm_backward(want_gx.data(), want_gw.data(), want_gb.data(), dy.data(), res.data(), w.data(),
                              mean.data(), rstd.data(), N, C);
      EXPECT_LE(rel_err(dgb.download(), want_gb), 1e-5) << paths << " db";
    }
    EXPECT_LE(rel_err(dgx.download(), want_gx), tol<A>(1e-5, 1e-2)) << paths << " dinp";
    EXPECT_LE(rel_err(got_gw[0], want_gw), 1e-5) << paths << " dw";
  }
  EXPECT_TRUE(got_gw[0] == got_gw[1]) << paths << " norm backward differs between two runs";
  EXPECT_EQ(device_error(), "");
}
TEST(CudaFastPaths, ResidualLayerNormBF16) { PARTRAIN_REQUIRE_GPU(); check_residual_norm<bf16>("all", false, 768); }
TEST(CudaFastPaths, ResidualLayerNormF32) { PARTRAIN_REQUIRE_GPU(); check_residual_norm<float>("all", false, 200); }
TEST(CudaFastPaths, ResidualRmsNormBF16) { PARTRAIN_REQUIRE_GPU(); check_residual_norm<bf16>("all", true, 1024); }
TEST(CudaFastPaths, ResidualLayerNormBF16Unfused) { PARTRAIN_REQUIRE_GPU(); check_residual_norm<bf16>("none", false, 768); }
// C not a whole number of 16-byte vectors: the fused path steps aside.
TEST(CudaFastPaths, LayerNormBF16OddWidth) { PARTRAIN_REQUIRE_GPU(); check_residual_norm<bf16>("all", false, 100); }

// 128-bit GELU / residual / SwiGLU, on aligned buffers and on views one element in (scalar).
template <typename A>
void check_pointwise(const char* paths, size_t shift) {
  PARTRAIN_CTX(c, paths);
  const int N = 37, F = 256;
  const size_t n = static_cast<size_t>(N) * F;
  auto x = rounded<A>(randn(n + shift, 50, 2.0f)), y = rounded<A>(randn(n + shift, 51));
  std::vector<float> xs(x.begin() + static_cast<long>(shift), x.end()), ys(y.begin() + static_cast<long>(shift), y.end());
  Dev<A> dx(x), dy(y), dout(n + shift);
  std::vector<float> want(n);
  cpu::gelu_forward(want.data(), xs.data(), n);
  ASSERT_TRUE(cu::gelu_forward<A>(c.ctx, dout.get() + shift, dx.get() + shift, n).is_ok());
  auto got = dout.download();
  EXPECT_LE(rel_err(std::vector<float>(got.begin() + static_cast<long>(shift), got.end()), want), tol<A>(1e-5, 1e-2))
      << paths << " gelu";
  cpu::residual_forward(want.data(), xs.data(), ys.data(), n);
  ASSERT_TRUE(cu::residual_forward<A>(c.ctx, dout.get() + shift, dx.get() + shift, dy.get() + shift, n).is_ok());
  got = dout.download();
  EXPECT_LE(rel_err(std::vector<float>(got.begin() + static_cast<long>(shift), got.end()), want), tol<A>(1e-6, 1e-2))
      << paths << " residual";
  auto g = rounded<A>(randn(n, 52)), gx0 = rounded<A>(randn(n, 53));
  auto gx = gx0;
  cpu::gelu_backward(gx.data(), xs.data(), g.data(), n);
  Dev<A> dg(g), dgx(gx0);
  ASSERT_TRUE(cu::gelu_backward<A>(c.ctx, dgx.get(), dx.get() + shift, dg.get(), n).is_ok());
  EXPECT_LE(rel_err(dgx.download(), gx), tol<A>(1e-5, 1e-2)) << paths << " gelu backward";
  // SwiGLU over [N, 2F] = [gate | up].
  auto h = rounded<A>(randn(2 * n, 54, 2.0f));
  std::vector<float> sw(n);
  cpu::swiglu_forward(sw.data(), h.data(), N, F);
  Dev<A> dh(h), dsw(n);
  ASSERT_TRUE(cu::swiglu_forward<A>(c.ctx, dsw.get(), dh.get(), N, F).is_ok());
  EXPECT_LE(rel_err(dsw.download(), sw), tol<A>(1e-5, 1e-2)) << paths << " swiglu";
  auto gh0 = rounded<A>(randn(2 * n, 55));
  auto gh = gh0;
  cpu::swiglu_backward(gh.data(), h.data(), g.data(), N, F);
  Dev<A> dgh(gh0);
  ASSERT_TRUE(cu::swiglu_backward<A>(c.ctx, dgh.get(), dh.get(), dg.get(), N, F).is_ok());
  EXPECT_LE(rel_err(dgh.download(), gh), tol<A>(1e-5, 1e-2)) << paths << " swiglu backward";
  EXPECT_EQ(device_error(), "");
}
TEST(CudaFastPaths, PointwiseVectorBF16) { PARTRAIN_REQUIRE_GPU(); check_pointwise<bf16>("all", 0); }
TEST(CudaFastPaths, PointwiseVectorF32) { PARTRAIN_REQUIRE_GPU(); check_pointwise<float>("all", 0); }
TEST(CudaFastPaths, PointwiseMisalignedBF16) { PARTRAIN_REQUIRE_GPU(); check_pointwise<bf16>("all", 1); }
TEST(CudaFastPaths, PointwiseScalarBF16) { PARTRAIN_REQUIRE_GPU(); check_pointwise<bf16>("none", 0); }

// One multi-tensor launch over three segments (decay 0.1, 0, 0.1) equals adamw_update on
// each; the clip factor comes from a device-side sum of squares.
TEST(CudaFastPaths, MultiTensorAdamW) {
  PARTRAIN_REQUIRE_GPU();
  PARTRAIN_CTX(c, "all");
  const size_t n = 100003;
  const std::vector<cu::AdamWSegment> segs = {{0, 40000, 0.1f, 0}, {40000, 40017, 0.0f, 0}, {40017, 100003, 0.1f, 0}};
  auto g = randn(n, 60, 0.05f), p = randn(n, 61), m = randn(n, 62, 0.01f), v = randn(n, 63, 0.001f);
  for (float& x : v) x = x * x;
  Dev<float> dg(g), dp(p), dm(m), dv(v), rp(p), rm(m), rv(v);
  Dev<bf16> dp16(n), rp16(n);
  Dev<cu::AdamWSegment> dsegs(segs.size());
  Dev<cu::AdamWScalars> dsc(1);
  Dev<double> sumsq(1);
  ASSERT_TRUE(cudaMemcpy(dsegs.get(), segs.data(), segs.size() * sizeof(cu::AdamWSegment), cudaMemcpyHostToDevice) ==
              cudaSuccess);
  const double ss = cpu::sum_squares(g.data(), n);
  const float max_norm = 1.0f, norm = static_cast<float>(std::sqrt(ss));
  const float clip = std::min(1.0f, max_norm / (norm + 1e-6f));
  for (int64_t t = 1; t <= 3; ++t) {
    const cu::AdamWScalars sc = cu::adamw_scalars(1e-3f, 0.9f, 0.95f, 1e-8f, t, 1.0f);
    ASSERT_TRUE(cudaMemcpy(dsc.get(), &sc, sizeof(sc), cudaMemcpyHostToDevice) == cudaSuccess);
    ASSERT_TRUE(cudaMemset(sumsq.get(), 0, sizeof(double)) == cudaSuccess);
    ASSERT_TRUE(cu::sum_squares<float>(c.ctx, sumsq.get(), dg.get(), n).is_ok());
    ASSERT_TRUE(cu::adamw_clip_scale(c.ctx, dsc.get(), sumsq.get(), max_norm, 1.0f).is_ok());
    ASSERT_TRUE(cu::adamw_multi(c.ctx, dp.get(), dm.get(), dv.get(), dg.get(), dp16.get(), n, dsegs.get(), 3, dsc.get())
                    .is_ok());
    for (const cu::AdamWSegment& s : segs) {
      const auto at = static_cast<size_t>(s.begin), len = static_cast<size_t>(s.end - s.begin);
      ASSERT_TRUE(cu::adamw_update(c.ctx, rp.get() + at, rm.get() + at, rv.get() + at, dg.get() + at, rp16.get() + at,
                                   len, 1e-3f, 0.9f, 0.95f, 1e-8f, s.weight_decay, t, clip)
                      .is_ok());
    }
  }
  EXPECT_LE(rel_err(dp.download(), rp.download()), 1e-6) << "master weights";
  EXPECT_LE(rel_err(dm.download(), rm.download()), 1e-6) << "m";
  EXPECT_LE(rel_err(dv.download(), rv.download()), 1e-6) << "v";
  EXPECT_LE(rel_err(dp16.download(), rounded<bf16>(dp.download())), 0.0) << "bf16 copy";
  cu::AdamWScalars back;
  ASSERT_TRUE(cudaMemcpy(&back, dsc.get(), sizeof(back), cudaMemcpyDeviceToHost) == cudaSuccess);
  EXPECT_LE(std::fabs(back.norm - norm) / norm, 1e-6) << "norm on the device";
  EXPECT_LE(std::fabs(back.grad_scale - clip) / clip, 1e-6) << "clip factor on the device";
  EXPECT_EQ(device_error(), "");
}

}  // namespace
}  // namespace partrain::gputest
