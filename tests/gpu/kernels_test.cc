// Every CUDA kernel against the CPU reference kernel (engine/cpu/kernels.h) on random
// inputs, forward and backward, in fp32 storage (checks the math: tolerance 1e-5 of the
// tensor's scale, a few ulp amplified by different summation orders) and in bf16 storage
// (what training uses: 1e-2, i.e. ~2.5 bf16 rounding steps of 2^-8, since each output is
// rounded once to bf16 after fp32 math and accumulating kernels round twice: old + new).
// Gradient outputs start from random values so the accumulate (+=) contract is checked.
// Attention has its own file (attention_test.cc).
#include <cstdint>
#include <vector>

#include "engine/cpu/kernels.h"
#include "engine/cpu/rows.h"
#include "engine/philox.h"
#include "gpu_test.h"
#include "gpu_util.h"

namespace partrain::gputest {
namespace {

namespace cpu = engine::cpu;
namespace cu = engine::cuda;

// A kernel context for one test.
struct Ctx {
  cu::Context ctx;
  Status status;
  Ctx() { status = cu::context_create(&ctx, 0); }
  ~Ctx() { cu::context_destroy(&ctx); }
};

#define PARTRAIN_CTX(c)          \
  Ctx c;                         \
  ASSERT_TRUE(c.status.is_ok()) << c.status.message()

template <typename A>
void check_embedding() {
  PARTRAIN_CTX(c);
  const int B = 3, T = 17, C = 64, V = 50;
  auto tokens = randint(static_cast<size_t>(B) * T, 1, V);
  tokens[5] = tokens[6] = tokens[40] = 7;  // repeated rows collide in dwte
  auto wte = rounded<A>(randn(static_cast<size_t>(V) * C, 2));
  auto wpe = rounded<A>(randn(static_cast<size_t>(T) * C, 3));
  std::vector<float> out(static_cast<size_t>(B) * T * C);
  cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  Dev<int32_t> dtok(tokens);
  Dev<A> dwte(wte), dwpe(wpe), dout(out.size());
  ASSERT_TRUE(cu::embedding_forward<A>(c.ctx, dout.get(), dtok.get(), dwte.get(), dwpe.get(), B, T,
                                       C).is_ok());
  EXPECT_LE(rel_err(dout.download(), out), tol<A>(1e-6, 1e-2)) << "embedding forward";

  auto dy = rounded<A>(randn(out.size(), 4));
  auto gwte = randn(wte.size(), 5), gwpe = randn(wpe.size(), 6);
  Dev<A> ddy(dy);
  Dev<float> dgwte(gwte), dgwpe(gwpe);
  cpu::embedding_backward(gwte.data(), gwpe.data(), dy.data(), tokens.data(), B, T, C);
  ASSERT_TRUE(cu::embedding_backward<A>(c.ctx, dgwte.get(), dgwpe.get(), ddy.get(), dtok.get(), B,
                                        T, C).is_ok());
  // Parameter gradients are fp32 in both storage modes: only summation order differs.
  EXPECT_LE(rel_err(dgwte.download(), gwte), 1e-5) << "dwte";
  EXPECT_LE(rel_err(dgwpe.download(), gwpe), 1e-5) << "dwpe";
  EXPECT_EQ(device_error(), "");
}
TEST(CudaKernels, EmbeddingF32) { PARTRAIN_REQUIRE_GPU(); check_embedding<float>(); }
TEST(CudaKernels, EmbeddingBF16) { PARTRAIN_REQUIRE_GPU(); check_embedding<bf16>(); }

// The embedding backward sums each token's rows in position order with no atomics: a
// vocabulary of 3 over 4096 positions (each row hit ~1365 times) gives the same bits twice,
// and those of the CPU reference, which adds the rows in the same order.
TEST(CudaKernels, EmbeddingBackwardIsDeterministic) {
  PARTRAIN_REQUIRE_GPU();
  PARTRAIN_CTX(c);
  const int B = 4, T = 1024, C = 64, V = 3;
  const auto tokens = randint(static_cast<size_t>(B) * T, 0, V);
  const auto dy = randn(static_cast<size_t>(B) * T * C, 9);
  std::vector<float> cpu_g(static_cast<size_t>(V) * C, 0.0f), cpu_p(static_cast<size_t>(T) * C, 0.0f);
  cpu::embedding_backward(cpu_g.data(), cpu_p.data(), dy.data(), tokens.data(), B, T, C);
  Dev<int32_t> dtok(tokens);
  Dev<float> ddy(dy);
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 2; ++run) {
    Dev<float> g(std::vector<float>(cpu_g.size(), 0.0f)), p(std::vector<float>(cpu_p.size(), 0.0f));
    ASSERT_TRUE(cu::embedding_backward<float>(c.ctx, g.get(), p.get(), ddy.get(), dtok.get(), B, T, C).is_ok());
    runs.push_back(g.download());
  }
  EXPECT_TRUE(runs[0] == runs[1]) << "two runs differ";
  EXPECT_TRUE(runs[0] == cpu_g) << "differs from the CPU reference's order";
  EXPECT_EQ(device_error(), "");
}

template <typename A>
void check_norms(bool rms) {
  PARTRAIN_CTX(c);
  const int N = 203, C = 160;  // N not a multiple of the 8 rows per block
  const size_t n = static_cast<size_t>(N) * C;
  auto x = rounded<A>(randn(n, 10, 2.0f, 0.5f));
  auto w = rounded<A>(randn(C, 11, 0.3f, 1.0f));
  auto b = rounded<A>(randn(C, 12, 0.3f));
  std::vector<float> out(n), mean(N), rstd(N);
  Dev<A> dx(x), dw(w), db(b), dout(n);
  Dev<float> dmean(N), drstd(N);
  if (rms) {
    cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
    ASSERT_TRUE(cu::rmsnorm_forward<A>(c.ctx, dout.get(), drstd.get(), dx.get(), dw.get(), N, C,
                                       1e-5f).is_ok());
  } else {
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N,
                           C, 1e-5f);
    ASSERT_TRUE(cu::layernorm_forward<A>(c.ctx, dout.get(), dmean.get(), drstd.get(), dx.get(),
                                         dw.get(), db.get(), N, C, 1e-5f).is_ok());
    EXPECT_LE(rel_err(dmean.download(), mean), 1e-5) << "mean";
  }
  EXPECT_LE(rel_err(dout.download(), out), tol<A>(1e-5, 1e-2)) << "norm forward";
  EXPECT_LE(rel_err(drstd.download(), rstd), 1e-5) << "rstd";

  auto dy = rounded<A>(randn(n, 13));
  auto gx = rounded<A>(randn(n, 14)), gw = randn(C, 15), gb = randn(C, 16);
  Dev<A> ddy(dy), dgx(gx);
  Dev<float> dgw(gw), dgb(gb);
  // The CPU backward sees the statistics the CPU forward produced; the GPU its own.
  if (rms) {
    cpu::rmsnorm_backward(gx.data(), gw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
    ASSERT_TRUE(cu::rmsnorm_backward<A>(c.ctx, dgx.get(), dgw.get(), ddy.get(), dx.get(), dw.get(),
                                        drstd.get(), N, C).is_ok());
  } else {
    cpu::layernorm_backward(gx.data(), gw.data(), gb.data(), dy.data(), x.data(), w.data(),
                            mean.data(), rstd.data(), N, C);
    ASSERT_TRUE(cu::layernorm_backward<A>(c.ctx, dgx.get(), dgw.get(), dgb.get(), ddy.get(),
                                          dx.get(), dw.get(), dmean.get(), drstd.get(), N, C)
                    .is_ok());
    EXPECT_LE(rel_err(dgb.download(), gb), 1e-5) << "db";
  }
  EXPECT_LE(rel_err(dgx.download(), gx), tol<A>(1e-5, 1e-2)) << "dinp";
  EXPECT_LE(rel_err(dgw.download(), gw), 1e-5) << "dw";
  EXPECT_EQ(device_error(), "");
}
TEST(CudaKernels, LayerNormF32) { PARTRAIN_REQUIRE_GPU(); check_norms<float>(false); }
TEST(CudaKernels, LayerNormBF16) { PARTRAIN_REQUIRE_GPU(); check_norms<bf16>(false); }
TEST(CudaKernels, RmsNormF32) { PARTRAIN_REQUIRE_GPU(); check_norms<float>(true); }
TEST(CudaKernels, RmsNormBF16) { PARTRAIN_REQUIRE_GPU(); check_norms<bf16>(true); }

template <typename A>
void check_matmul(bool with_bias) {
  PARTRAIN_CTX(c);
  const int N = 96, C = 72, OC = 136;
  auto x = rounded<A>(randn(static_cast<size_t>(N) * C, 20));
  auto w = rounded<A>(randn(static_cast<size_t>(OC) * C, 21, 0.1f));
  auto bias = rounded<A>(randn(OC, 22));
  std::vector<float> out(static_cast<size_t>(N) * OC);
  cpu::matmul_forward(out.data(), x.data(), w.data(), with_bias ? bias.data() : nullptr, N, C, OC);
  Dev<A> dx(x), dw(w), dbias(bias), dout(out.size());
  ASSERT_TRUE(cu::matmul_forward<A>(c.ctx, dout.get(), dx.get(), dw.get(),
                                    with_bias ? dbias.get() : nullptr, N, C, OC).is_ok());
  EXPECT_LE(rel_err(dout.download(), out), tol<A>(1e-5, 1e-2)) << "matmul forward";

  auto dy = rounded<A>(randn(out.size(), 23));
  auto gx = rounded<A>(randn(x.size(), 24)), gw = randn(w.size(), 25), gb = randn(OC, 26);
  Dev<A> ddy(dy), dgx(gx);
  Dev<float> dgw(gw), dgb(gb);
  cpu::matmul_backward(gx.data(), gw.data(), with_bias ? gb.data() : nullptr, dy.data(), x.data(),
                       w.data(), N, C, OC);
  ASSERT_TRUE(cu::matmul_backward<A>(c.ctx, dgx.get(), dgw.get(), with_bias ? dgb.get() : nullptr,
                                     ddy.get(), dx.get(), dw.get(), N, C, OC).is_ok());
  EXPECT_LE(rel_err(dgx.download(), gx), tol<A>(1e-5, 1e-2)) << "dinp";
  EXPECT_LE(rel_err(dgw.download(), gw), 1e-5) << "dw (fp32 accumulation of exact products)";
  EXPECT_LE(rel_err(dgb.download(), gb), 1e-5) << "dbias";
  EXPECT_EQ(device_error(), "");
}
TEST(CudaKernels, MatmulF32) { PARTRAIN_REQUIRE_GPU(); check_matmul<float>(true); }
TEST(CudaKernels, MatmulBF16) { PARTRAIN_REQUIRE_GPU(); check_matmul<bf16>(true); }
TEST(CudaKernels, MatmulNoBiasBF16) { PARTRAIN_REQUIRE_GPU(); check_matmul<bf16>(false); }

template <typename A>
void check_gelu_swiglu() {
  PARTRAIN_CTX(c);
  const int N = 70, F = 96;
  const size_t n = static_cast<size_t>(N) * F;
  {
    auto x = rounded<A>(randn(n, 30, 2.0f));
    std::vector<float> y(n);
    cpu::gelu_forward(y.data(), x.data(), n);
    Dev<A> dx(x), dy(n);
    ASSERT_TRUE(cu::gelu_forward<A>(c.ctx, dy.get(), dx.get(), n).is_ok());
    EXPECT_LE(rel_err(dy.download(), y), tol<A>(1e-5, 1e-2)) << "gelu forward";
    auto g = rounded<A>(randn(n, 31)), gx = rounded<A>(randn(n, 32));
    Dev<A> dg(g), dgx(gx);
    cpu::gelu_backward(gx.data(), x.data(), g.data(), n);
    ASSERT_TRUE(cu::gelu_backward<A>(c.ctx, dgx.get(), dx.get(), dg.get(), n).is_ok());
    EXPECT_LE(rel_err(dgx.download(), gx), tol<A>(1e-5, 1e-2)) << "gelu backward";
  }
  {
    auto x = rounded<A>(randn(2 * n, 33, 2.0f));
    std::vector<float> y(n);
    cpu::swiglu_forward(y.data(), x.data(), N, F);
    Dev<A> dx(x), dy(n);
    ASSERT_TRUE(cu::swiglu_forward<A>(c.ctx, dy.get(), dx.get(), N, F).is_ok());
    EXPECT_LE(rel_err(dy.download(), y), tol<A>(1e-5, 1e-2)) << "swiglu forward";
    auto g = rounded<A>(randn(n, 34)), gx = rounded<A>(randn(2 * n, 35));
    Dev<A> dg(g), dgx(gx);
    cpu::swiglu_backward(gx.data(), x.data(), g.data(), N, F);
    ASSERT_TRUE(cu::swiglu_backward<A>(c.ctx, dgx.get(), dx.get(), dg.get(), N, F).is_ok());
    EXPECT_LE(rel_err(dgx.download(), gx), tol<A>(1e-5, 1e-2)) << "swiglu backward";
  }
  EXPECT_EQ(device_error(), "");
}
TEST(CudaKernels, GeluSwigluF32) { PARTRAIN_REQUIRE_GPU(); check_gelu_swiglu<float>(); }
TEST(CudaKernels, GeluSwigluBF16) { PARTRAIN_REQUIRE_GPU(); check_gelu_swiglu<bf16>(); }

template <typename A>
void check_rope() {
  PARTRAIN_CTX(c);
  // q heads inside a packed qkv row (stride > heads*hd), rotated in place.
  const int B = 2, T = 33, H = 3, KV = 1, hd = 16, stride = (H + 2 * KV) * hd;
  const size_t n = static_cast<size_t>(B) * T * stride;
  auto x = rounded<A>(randn(n, 40));
  std::vector<float> y = x;
  cpu::rope_forward(y.data(), y.data(), B, T, H, hd, stride, 10000.0f);
  Dev<A> dx(x);
  ASSERT_TRUE(cu::rope_forward<A>(c.ctx, dx.get(), dx.get(), B, T, H, hd, stride, 10000.0f).is_ok());
  // The k/v columns must stay untouched: they are part of the compared row.
  EXPECT_LE(rel_err(dx.download(), y), tol<A>(1e-5, 1e-2)) << "rope forward (in place)";
  auto g = rounded<A>(randn(n, 41));
  std::vector<float> gx = g;
  cpu::rope_backward(gx.data(), gx.data(), B, T, H, hd, stride, 10000.0f);
  Dev<A> dg(g);
  ASSERT_TRUE(cu::rope_backward<A>(c.ctx, dg.get(), dg.get(), B, T, H, hd, stride, 10000.0f).is_ok());
  EXPECT_LE(rel_err(dg.download(), gx), tol<A>(1e-5, 1e-2)) << "rope backward (in place)";
  EXPECT_EQ(device_error(), "");
}
TEST(CudaKernels, RopeF32) { PARTRAIN_REQUIRE_GPU(); check_rope<float>(); }
TEST(CudaKernels, RopeBF16) { PARTRAIN_REQUIRE_GPU(); check_rope<bf16>(); }

template <typename A>
void check_crossentropy() {
  PARTRAIN_CTX(c);
  const int N = 45, V = 300, Vp = 320;
  auto logits = rounded<A>(randn(static_cast<size_t>(N) * V, 50, 3.0f));
  auto targets = randint(N, 51, V);
  targets[3] = -1;  // ignored position
  std::vector<float> losses(N), lse(N);
  cpu::crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), N, V);
  Dev<A> dlogits(logits);
  Dev<int32_t> dtargets(targets);
  Dev<float> dlosses(N), dlse(N);
  ASSERT_TRUE(cu::crossentropy_forward<A>(c.ctx, dlosses.get(), dlse.get(), dlogits.get(),
                                          dtargets.get(), N, V, V).is_ok());
  // Losses and lse are fp32 from the same (rounded) logits: only summation order differs.
  EXPECT_LE(rel_err(dlosses.download(), losses), 1e-5) << "losses";
  EXPECT_LE(rel_err(dlse.download(), lse), 1e-5) << "lse";

  auto dloss = randn(N, 52, 0.1f, 1.0f);
  auto g = rounded<A>(randn(logits.size(), 53, 0.01f));
  Dev<A> dg(g);
  Dev<float> ddloss(dloss);
  cpu::crossentropy_backward(g.data(), logits.data(), lse.data(), targets.data(), dloss.data(), N, V);
  ASSERT_TRUE(cu::crossentropy_backward<A>(c.ctx, dg.get(), dlogits.get(), dlse.get(),
                                           dtargets.get(), ddloss.get(), N, V, V).is_ok());
  EXPECT_LE(rel_err(dg.download(), g), tol<A>(1e-5, 1e-2)) << "dlogits";

  // Fused, on a padded [N, Vp] buffer: loss plus dlogits = s * (softmax - onehot) in place,
  // padding columns 0. Reference: CPU forward, then CPU backward into zeros with dloss = s.
  const float s = 1.0f / N;
  std::vector<float> padded(static_cast<size_t>(N) * Vp, 0.0f);
  for (int r = 0; r < N; ++r)
    for (int v = 0; v < V; ++v) padded[static_cast<size_t>(r) * Vp + v] = logits[static_cast<size_t>(r) * V + v];
  std::vector<float> ref_grad(static_cast<size_t>(N) * V, 0.0f), dl(N, s);
  cpu::crossentropy_backward(ref_grad.data(), logits.data(), lse.data(), targets.data(), dl.data(), N, V);
  std::vector<float> want(padded.size(), 0.0f);
  for (int r = 0; r < N; ++r)
    for (int v = 0; v < V; ++v) want[static_cast<size_t>(r) * Vp + v] = ref_grad[static_cast<size_t>(r) * V + v];
  Dev<A> dpad(padded);
  Dev<float> dl2(N);
  ASSERT_TRUE(cu::crossentropy_fused<A>(c.ctx, dl2.get(), dpad.get(), dtargets.get(), s, N, V, Vp).is_ok());
  EXPECT_LE(rel_err(dl2.download(), losses), 1e-5) << "fused losses";
  EXPECT_LE(rel_err(dpad.download(), want), tol<A>(1e-5, 1e-2)) << "fused dlogits";
  EXPECT_EQ(device_error(), "");
}
TEST(CudaKernels, CrossEntropyF32) { PARTRAIN_REQUIRE_GPU(); check_crossentropy<float>(); }
TEST(CudaKernels, CrossEntropyBF16) { PARTRAIN_REQUIRE_GPU(); check_crossentropy<bf16>(); }

template <typename A>
void check_dropout_residual() {
  PARTRAIN_CTX(c);
  const size_t n = 10007;
  const float p = 0.3f;
  const uint64_t seed = engine::philox_key(1337, 5, 2), offset = 123456789;
  auto x = rounded<A>(randn(n, 60));
  std::vector<float> y(n);
  cpu::dropout_forward(y.data(), x.data(), n, p, seed, offset);
  Dev<A> dx(x), dy(n);
  ASSERT_TRUE(cu::dropout_forward<A>(c.ctx, dy.get(), dx.get(), n, p, seed, offset).is_ok());
  const auto got = dy.download();
  // Same Philox stream on both devices: the same elements are dropped.
  size_t mismatched = 0, dropped = 0;
  for (size_t i = 0; i < n; ++i) {
    mismatched += (got[i] == 0.0f) != (y[i] == 0.0f);
    dropped += y[i] == 0.0f;
  }
  EXPECT_EQ(mismatched, 0u) << "dropout masks differ";
  EXPECT_TRUE(dropped > n / 4 && dropped < n * 7 / 20) << dropped << " of " << n << " dropped";
  EXPECT_LE(rel_err(got, y), tol<A>(1e-6, 1e-2)) << "dropout forward";
  auto g = rounded<A>(randn(n, 61)), gx = rounded<A>(randn(n, 62));
  Dev<A> dg(g), dgx(gx);
  cpu::dropout_backward(gx.data(), g.data(), n, p, seed, offset);
  ASSERT_TRUE(cu::dropout_backward<A>(c.ctx, dgx.get(), dg.get(), n, p, seed, offset).is_ok());
  EXPECT_LE(rel_err(dgx.download(), gx), tol<A>(1e-6, 1e-2)) << "dropout backward";

  auto a = rounded<A>(randn(n, 63)), b = rounded<A>(randn(n, 64));
  std::vector<float> r(n);
  cpu::residual_forward(r.data(), a.data(), b.data(), n);
  Dev<A> da(a), db(b), dr(n);
  ASSERT_TRUE(cu::residual_forward<A>(c.ctx, dr.get(), da.get(), db.get(), n).is_ok());
  EXPECT_LE(rel_err(dr.download(), r), tol<A>(1e-7, 1e-2)) << "residual";
  EXPECT_EQ(device_error(), "");
}
TEST(CudaKernels, DropoutResidualF32) { PARTRAIN_REQUIRE_GPU(); check_dropout_residual<float>(); }
TEST(CudaKernels, DropoutResidualBF16) { PARTRAIN_REQUIRE_GPU(); check_dropout_residual<bf16>(); }

TEST(CudaKernels, SumSquaresAndAdamW) {
  PARTRAIN_REQUIRE_GPU();
  PARTRAIN_CTX(c);
  const size_t n = 300001;
  auto g = randn(n, 70, 0.01f);
  Dev<float> dg(g);
  Dev<double> acc(1);
  ASSERT_TRUE(cu::sum_squares<float>(c.ctx, acc.get(), dg.get(), n).is_ok());
  ASSERT_TRUE(cu::sum_squares<float>(c.ctx, acc.get(), dg.get(), n).is_ok());  // accumulates
  const double want = 2.0 * cpu::sum_squares(g.data(), n);
  double got = 0.0;
  ASSERT_TRUE(cudaMemcpy(&got, acc.get(), sizeof(double), cudaMemcpyDeviceToHost) == cudaSuccess);
  EXPECT_LE(std::fabs(got - want) / want, 1e-9) << "sum of squares " << got << " vs " << want;

  // AdamW: two steps on fp32 master weights, bf16 copy written alongside.
  auto p = randn(n, 71), m = randn(n, 72, 0.01f), v = randn(n, 73, 0.001f);
  for (float& x : v) x = x * x;  // second moments are non-negative
  Dev<float> dp(p), dm(m), dv(v);
  Dev<bf16> dp16(n);
  for (int64_t t = 1; t <= 2; ++t) {
    cpu::adamw_update(p.data(), m.data(), v.data(), g.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
                      t, 0.5f);
    ASSERT_TRUE(cu::adamw_update(c.ctx, dp.get(), dm.get(), dv.get(), dg.get(), dp16.get(), n, 1e-3f,
                                 0.9f, 0.95f, 1e-8f, 0.1f, t, 0.5f).is_ok());
  }
  // Same fp32 operations in the same order; FMA contraction on the GPU leaves ~1 ulp.
  EXPECT_LE(rel_err(dp.download(), p), 1e-6) << "master weights";
  EXPECT_LE(rel_err(dm.download(), m), 1e-6) << "m";
  EXPECT_LE(rel_err(dv.download(), v), 1e-6) << "v";
  EXPECT_LE(rel_err(dp16.download(), rounded<bf16>(dp.download())), 0.0) << "bf16 copy";
  EXPECT_EQ(device_error(), "");
}

template <typename A>
void check_rows() {
  PARTRAIN_CTX(c);
  const int N = 40, M = 17, C = 48;
  auto x = rounded<A>(randn(static_cast<size_t>(N) * C, 80));
  std::vector<int32_t> idx(M);
  for (int i = 0; i < M; ++i) idx[i] = (i * 7 + 3) % N;  // unique rows
  auto w = randn(M, 81, 0.5f, 1.0f);
  std::vector<float> g(static_cast<size_t>(M) * C);
  cpu::gather_rows(g.data(), x.data(), idx.data(), w.data(), M, C);
  Dev<A> dx(x), dg(g.size());
  Dev<int32_t> didx(idx);
  Dev<float> dw(w);
  ASSERT_TRUE(cu::gather_rows<A>(c.ctx, dg.get(), dx.get(), didx.get(), dw.get(), M, C).is_ok());
  EXPECT_LE(rel_err(dg.download(), g), tol<A>(1e-7, 1e-2)) << "gather_rows";
  auto src = rounded<A>(randn(g.size(), 82));
  auto out = rounded<A>(randn(x.size(), 83));
  Dev<A> dsrc(src), dout(out);
  cpu::scatter_add_rows(out.data(), src.data(), idx.data(), w.data(), M, C);
  ASSERT_TRUE(cu::scatter_add_rows<A>(c.ctx, dout.get(), dsrc.get(), didx.get(), dw.get(), M, C).is_ok());
  EXPECT_LE(rel_err(dout.download(), out), tol<A>(1e-6, 1e-2)) << "scatter_add_rows";
  std::vector<float> dots(M);
  cpu::gathered_row_dot(dots.data(), x.data(), idx.data(), src.data(), M, C);
  Dev<float> ddots(M);
  ASSERT_TRUE(cu::gathered_row_dot<A>(c.ctx, ddots.get(), dx.get(), didx.get(), dsrc.get(), M, C).is_ok());
  EXPECT_LE(rel_err(ddots.download(), dots), 1e-6) << "gathered_row_dot";
  EXPECT_EQ(device_error(), "");
}
TEST(CudaKernels, RowsF32) { PARTRAIN_REQUIRE_GPU(); check_rows<float>(); }
TEST(CudaKernels, RowsBF16) { PARTRAIN_REQUIRE_GPU(); check_rows<bf16>(); }

}  // namespace
}  // namespace partrain::gputest
