// Causal grouped-query attention on the GPU (the GEMM + fused-softmax path and the
// flash-style path) against the CPU reference, with q, k, v as
// views into one packed qkv buffer (the model's layout) and T not a multiple of 32.
// Tolerances: fp32 1e-4 of the tensor's scale (softmax exponentials and T-long sums in
// another order); bf16 2e-2 forward and 3e-2 backward: the probabilities P (and in backward
// dS = P (dP - D)) are rounded to bf16 before the second GEMM, on top of the output
// rounding, so each output carries two or three roundings of 2^-9 relative, compounded over
// the rows of a softmax. lse is fp32 from fp32-accumulated scores: 1e-5.
#include <cstdint>
#include <vector>

#include "engine/cpu/kernels.h"
#include "gpu_test.h"
#include "gpu_util.h"

namespace partrain::gputest {
namespace {

namespace cpu = engine::cpu;
namespace cu = engine::cuda;

enum class Path { kGemm, kFlash, kCudnn };

template <typename A>
void check_attention(int B, int T, int H, int KV, int hd, Path path = Path::kGemm) {
  const bool flash = path == Path::kFlash, cudnn = path == Path::kCudnn;
  cu::Context ctx;
  const Status st = cu::context_create(&ctx, 0);
  ASSERT_TRUE(st.is_ok()) << st.message();
  const int stride = (H + 2 * KV) * hd;
  const size_t N = static_cast<size_t>(B) * T;
  auto qkv = rounded<A>(randn(N * stride, 90));
  std::vector<float> out(N * H * hd), lse(static_cast<size_t>(B) * H * T);
  const float* q = qkv.data();
  const float* k = q + H * hd;
  const float* v = k + KV * hd;
  cpu::attention_forward(out.data(), lse.data(), q, k, v, B, T, H, KV, hd, stride, stride);

  Dev<A> dqkv(qkv), dout(out.size());
  Dev<float> dlse(lse.size());
  Dev<char> ws(cu::attention_workspace_bytes<A>(B, T, H, KV, hd));
  A* dq = dqkv.get();
  A* dk = dq + H * hd;
  A* dv = dk + KV * hd;
  Dev<float> delta(cu::attention_flash_workspace_bytes(B, T, H) / sizeof(float));
  Status s = cudnn ? cu::attention_forward_cudnn<A>(ctx, dout.get(), dlse.get(), dq, dk, dv, B, T, H, KV, hd,
                                                    stride, stride)
             : flash ? cu::attention_forward_flash<A>(ctx, dout.get(), dlse.get(), dq, dk, dv, B, T, H,
                                                    KV, hd, stride, stride)
                   : cu::attention_forward<A>(ctx, dout.get(), dlse.get(), dq, dk, dv, B, T, H, KV,
                                              hd, stride, stride, ws.get());
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_LE(rel_err(dout.download(), out), tol<A>(1e-4, 2e-2)) << "attention out";
  // cuDNN's exponentials are its own (exp2-based): lse to 1e-4 of its scale there.
  EXPECT_LE(rel_err(dlse.download(), lse), cudnn ? 1e-4 : 1e-5) << "lse";

  auto dy = rounded<A>(randn(out.size(), 91));
  // Accumulated into, except by cuDNN, which writes the gradients (start it from zero).
  auto g = cudnn ? std::vector<float>(qkv.size(), 0.0f) : rounded<A>(randn(qkv.size(), 92, 0.1f));
  float* gq = g.data();
  cpu::attention_backward(gq, gq + H * hd, gq + (H + KV) * hd, dy.data(), out.data(), lse.data(),
                          q, k, v, B, T, H, KV, hd, stride, stride);
  // The GPU's dq, dk, dv: views into one packed gradient buffer, like the model's.
  auto g0 = rounded<A>(randn(qkv.size(), 92, 0.1f));  // cuDNN must overwrite all of it
  Dev<A> dg(g0), ddy(dy);
  A* gdq = dg.get();
  s = cudnn ? cu::attention_backward_cudnn<A>(ctx, gdq, gdq + H * hd, gdq + (H + KV) * hd, ddy.get(), dout.get(),
                                              dlse.get(), dq, dk, dv, B, T, H, KV, hd, stride, stride)
      : flash ? cu::attention_backward_flash<A>(ctx, gdq, gdq + H * hd, gdq + (H + KV) * hd, ddy.get(),
                                              dout.get(), dlse.get(), dq, dk, dv, B, T, H, KV, hd,
                                              stride, stride, delta.get())
            : cu::attention_backward<A>(ctx, gdq, gdq + H * hd, gdq + (H + KV) * hd, ddy.get(),
                                        dout.get(), dlse.get(), dq, dk, dv, B, T, H, KV, hd, stride,
                                        stride, ws.get());
  ASSERT_TRUE(s.is_ok()) << s.message();
  // Compare q, k and v gradients separately: their scales differ.
  const auto got = dg.download();
  for (int part = 0; part < 3; ++part) {
    const int lo = part == 0 ? 0 : part == 1 ? H * hd : (H + KV) * hd;
    const int hi = part == 0 ? H * hd : part == 1 ? (H + KV) * hd : stride;
    std::vector<float> a, b;
    for (size_t n = 0; n < N; ++n) {
      for (int j = lo; j < hi; ++j) {
        a.push_back(got[n * stride + j]);
        b.push_back(g[n * stride + j]);
      }
    }
    EXPECT_LE(rel_err(a, b), tol<A>(1e-4, 3e-2)) << (part == 0 ? "dq" : part == 1 ? "dk" : "dv");
  }
  if (cudnn) {  // deterministic backward: the same bits again
    Dev<A> dg2(g0);
    A* g2 = dg2.get();
    s = cu::attention_backward_cudnn<A>(ctx, g2, g2 + H * hd, g2 + (H + KV) * hd, ddy.get(), dout.get(), dlse.get(), dq,
                                        dk, dv, B, T, H, KV, hd, stride, stride);
    ASSERT_TRUE(s.is_ok()) << s.message();
    EXPECT_TRUE(dg2.download() == got) << "cuDNN backward differs between two runs";
  }
  EXPECT_EQ(device_error(), "");
  cu::context_destroy(&ctx);
}

TEST(CudaAttention, MultiHeadF32) { PARTRAIN_REQUIRE_GPU(); check_attention<float>(2, 50, 4, 4, 32); }
TEST(CudaAttention, MultiHeadBF16) { PARTRAIN_REQUIRE_GPU(); check_attention<bf16>(2, 50, 4, 4, 32); }
TEST(CudaAttention, GroupedQueryF32) { PARTRAIN_REQUIRE_GPU(); check_attention<float>(3, 37, 6, 2, 16); }
TEST(CudaAttention, GroupedQueryBF16) { PARTRAIN_REQUIRE_GPU(); check_attention<bf16>(3, 37, 6, 2, 16); }
TEST(CudaAttention, LongerSequenceBF16) { PARTRAIN_REQUIRE_GPU(); check_attention<bf16>(1, 256, 4, 1, 64); }

// The flash-style path (no T x T buffer): same shapes, same tolerances (it keeps P in fp32,
// so bf16 errors are only the output roundings).
TEST(CudaAttention, FlashMultiHeadF32) { PARTRAIN_REQUIRE_GPU(); check_attention<float>(2, 50, 4, 4, 32, Path::kFlash); }
TEST(CudaAttention, FlashMultiHeadBF16) { PARTRAIN_REQUIRE_GPU(); check_attention<bf16>(2, 50, 4, 4, 32, Path::kFlash); }
TEST(CudaAttention, FlashGroupedQueryF32) { PARTRAIN_REQUIRE_GPU(); check_attention<float>(3, 37, 6, 2, 16, Path::kFlash); }
TEST(CudaAttention, FlashGroupedQueryBF16) { PARTRAIN_REQUIRE_GPU(); check_attention<bf16>(3, 37, 6, 2, 16, Path::kFlash); }
TEST(CudaAttention, FlashLongerSequenceF32) { PARTRAIN_REQUIRE_GPU(); check_attention<float>(1, 200, 4, 2, 64, Path::kFlash); }
TEST(CudaAttention, FlashHead128BF16) { PARTRAIN_REQUIRE_GPU(); check_attention<bf16>(2, 70, 2, 1, 128, Path::kFlash); }

// cuDNN's fused SDPA (the "cudnn" path): the same shapes in bf16 (its only dtype), and
// GPT-2's. A machine where cuDNN cannot load fails these with the reason.
TEST(CudaAttention, CudnnMultiHeadBF16) { PARTRAIN_REQUIRE_GPU(); check_attention<bf16>(2, 50, 4, 4, 32, Path::kCudnn); }
TEST(CudaAttention, CudnnGroupedQueryBF16) { PARTRAIN_REQUIRE_GPU(); check_attention<bf16>(3, 37, 6, 2, 16, Path::kCudnn); }
TEST(CudaAttention, CudnnLongerSequenceBF16) { PARTRAIN_REQUIRE_GPU(); check_attention<bf16>(1, 256, 4, 1, 64, Path::kCudnn); }
TEST(CudaAttention, CudnnHead128BF16) { PARTRAIN_REQUIRE_GPU(); check_attention<bf16>(2, 70, 2, 1, 128, Path::kCudnn); }
TEST(CudaAttention, CudnnGpt2ShapeBF16) { PARTRAIN_REQUIRE_GPU(); check_attention<bf16>(1, 1024, 12, 12, 64, Path::kCudnn); }

// The graph's descriptors (everything below the operation graph) finalize without a device:
// run wherever cuDNN's library loads, skipped where it does not.
TEST(CudaAttention, CudnnGraphDescriptorsNeedNoGpu) {
  int ops = 0;
  const Status s = cu::cudnn_sdpa_describe(16, 1024, 12, 4, 64, 20 * 64, 20 * 64, false, &ops);
  if (!s.is_ok() && s.code() == StatusCode::kUnavailable) GTEST_SKIP() << s.message();
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_TRUE(ops > 0);
  const Status b = cu::cudnn_sdpa_describe(16, 1024, 12, 4, 64, 20 * 64, 20 * 64, true, &ops);
  ASSERT_TRUE(b.is_ok()) << b.message();
  EXPECT_TRUE(ops > 0);
}

}  // namespace
}  // namespace partrain::gputest
