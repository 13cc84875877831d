// Context parallelism's GPU kernels against the CPU reference (engine/cpu/attention_block.cc):
// a cp2 rank's queries (two chunks of every sequence, engine/positions.h) against each cp
// rank's block of keys, merged block after block into out / lse (forward), then the blocks'
// dq, dk, dv from the final out and lse (backward, accumulated into random gradients); GQA,
// a head dim that is not a multiple of 32; and RoPE at the chunks' positions. The CPU
// reference is itself checked against the one-rank kernels and finite differences
// (tests/engine/attention_block_test.cc). Tolerances as attention_test.cc: fp32 1e-4 (sums
// in another order), bf16 2e-2 forward and 3e-2 backward (inputs and outputs in bf16).
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/cpu/kernels.h"
#include "engine/positions.h"
#include "gpu_test.h"
#include "gpu_util.h"

namespace partrain::gputest {
namespace {

namespace cpu = engine::cpu;
namespace cu = engine::cuda;
using engine::SeqPositions;

struct Ctx {
  cu::Context ctx;
  Status status;
  Ctx() { status = cu::context_create(&ctx, 0); }
  ~Ctx() { cu::context_destroy(&ctx); }
};

template <typename A>
void check_blocks(int hd, int H, int KV) {
  Ctx c;
  ASSERT_TRUE(c.status.is_ok()) << c.status.message();
  const int B = 2, T = 48, cp = 2, Tq = T / cp;
  const int stride = (H + 2 * KV) * hd;  // q, k, v as views of one packed buffer per rank
  const SeqPositions qpos = engine::context_positions(T, 0, cp);
  // This rank's packed q/k/v, and the other rank's (its k/v block arrives from there).
  auto mine = rounded<A>(randn(static_cast<size_t>(B) * Tq * stride, 200));
  auto other = rounded<A>(randn(static_cast<size_t>(B) * Tq * stride, 201));
  const size_t on = static_cast<size_t>(B) * Tq * H * hd, ln = static_cast<size_t>(B) * H * Tq;
  std::vector<float> out(on, 0.0f), lse(ln, -INFINITY);
  Dev<A> dmine(mine), dother(other), dout(on);
  Dev<float> dlse(lse);
  auto shape = [&](int rank) {
    cpu::AttentionBlockShape s;
    s.B = B, s.Tq = Tq, s.Tk = Tq, s.H = H, s.KV = KV, s.hd = hd, s.q_stride = stride, s.kv_stride = stride;
    s.q_pos = qpos;
    s.k_pos = engine::context_positions(T, rank, cp);
    return s;
  };
  auto args = [&](const cpu::AttentionBlockShape& s) {
    cu::AttentionBlockArgs a;
    a.B = s.B, a.Tq = s.Tq, a.Tk = s.Tk, a.H = s.H, a.KV = s.KV, a.hd = s.hd;
    a.q_stride = s.q_stride, a.kv_stride = s.kv_stride, a.q_pos = s.q_pos, a.k_pos = s.k_pos;
    return a;
  };
  // Blocks in ring order: own, then the other rank's.
  for (int rank : {0, 1}) {
    const auto& kv = rank == 0 ? mine : other;
    const cpu::AttentionBlockShape s = shape(rank);
    cpu::attention_block_forward(out.data(), lse.data(), mine.data(), kv.data() + H * hd,
                                 kv.data() + (H + KV) * hd, s);
    const A* dkv = rank == 0 ? dmine.get() : dother.get();
    const Status st = cu::attention_block_forward<A>(c.ctx, dout.get(), dlse.get(), dmine.get(), dkv + H * hd,
                                                     dkv + (H + KV) * hd, args(s));
    ASSERT_TRUE(st.is_ok()) << st.message();
  }
  EXPECT_LE(rel_err(dout.download(), out), tol<A>(1e-4, 2e-2)) << "merged out";
  EXPECT_LE(rel_err(dlse.download(), lse), 1e-5) << "merged lse";

  // Backward from the CPU's final out and lse (rounded to storage), both blocks.
  const auto out_r = rounded<A>(out);
  Dev<A> dfinal(out_r);
  Dev<float> dfl(lse);
  auto dy = rounded<A>(randn(on, 202));
  Dev<A> ddy(dy);
  for (int rank : {0, 1}) {
    const auto& kv = rank == 0 ? mine : other;
    const cpu::AttentionBlockShape s = shape(rank);
    auto gq = rounded<A>(randn(mine.size(), 210 + static_cast<uint32_t>(rank), 0.1f));
    auto gkv = rounded<A>(randn(mine.size(), 220 + static_cast<uint32_t>(rank), 0.1f));
    Dev<A> dgq(gq), dgkv(gkv);
    cpu::attention_block_backward(gq.data(), gkv.data() + H * hd, gkv.data() + (H + KV) * hd, dy.data(), out_r.data(),
                                  lse.data(), mine.data(), kv.data() + H * hd, kv.data() + (H + KV) * hd, s);
    const A* dkv = rank == 0 ? dmine.get() : dother.get();
    Dev<float> delta(ln);
    const Status st2 = cu::attention_block_backward<A>(
        c.ctx, dgq.get(), dgkv.get() + H * hd, dgkv.get() + (H + KV) * hd, ddy.get(), dfinal.get(), dfl.get(),
        dmine.get(), dkv + H * hd, dkv + (H + KV) * hd, args(s), delta.get());
    ASSERT_TRUE(st2.is_ok()) << st2.message();
    const auto got_q = dgq.download(), got_kv = dgkv.download();
    std::vector<float> a, b;
    for (size_t n = 0; n < static_cast<size_t>(B) * Tq; ++n) {
      for (int j = 0; j < H * hd; ++j) a.push_back(got_q[n * stride + j]), b.push_back(gq[n * stride + j]);
    }
    EXPECT_LE(rel_err(a, b), tol<A>(1e-4, 3e-2)) << "dq, block of rank " << rank;
    for (int part = 1; part <= 2; ++part) {
      a.clear(), b.clear();
      const int lo = part == 1 ? H * hd : (H + KV) * hd;
      for (size_t n = 0; n < static_cast<size_t>(B) * Tq; ++n) {
        for (int j = lo; j < lo + KV * hd; ++j) a.push_back(got_kv[n * stride + j]), b.push_back(gkv[n * stride + j]);
      }
      EXPECT_LE(rel_err(a, b), tol<A>(1e-4, 3e-2)) << (part == 1 ? "dk" : "dv") << ", block of rank " << rank;
    }
  }
  EXPECT_EQ(device_error(), "");
}

TEST(CudaContextParallel, BlocksF32) { PARTRAIN_REQUIRE_GPU(); check_blocks<float>(32, 4, 4); }
TEST(CudaContextParallel, BlocksBF16) { PARTRAIN_REQUIRE_GPU(); check_blocks<bf16>(32, 4, 4); }
TEST(CudaContextParallel, BlocksGroupedQueryF32) { PARTRAIN_REQUIRE_GPU(); check_blocks<float>(24, 6, 2); }
TEST(CudaContextParallel, BlocksHead128BF16) { PARTRAIN_REQUIRE_GPU(); check_blocks<bf16>(128, 2, 1); }

template <typename A>
void check_rope_positions() {
  Ctx c;
  ASSERT_TRUE(c.status.is_ok()) << c.status.message();
  const int B = 2, T = 32, heads = 3, hd = 16, stride = heads * hd + 8;
  const SeqPositions pos = engine::context_positions(2 * T, 1, 2);  // rank 1 of cp2: positions 16..31, 32..47
  auto x = rounded<A>(randn(static_cast<size_t>(B) * T * stride, 230));
  auto want = x;
  cpu::rope_forward(want.data(), x.data(), B, T, heads, hd, stride, 10000.0f, pos);
  Dev<A> dx(x);
  ASSERT_TRUE(cu::rope_forward<A>(c.ctx, dx.get(), dx.get(), B, T, heads, hd, stride, 10000.0f, pos).is_ok());
  EXPECT_LE(rel_err(dx.download(), want), tol<A>(1e-6, 1e-2)) << "rope forward at chunk positions";
  auto back = want;
  cpu::rope_backward(back.data(), want.data(), B, T, heads, hd, stride, 10000.0f, pos);
  ASSERT_TRUE(cu::rope_backward<A>(c.ctx, dx.get(), dx.get(), B, T, heads, hd, stride, 10000.0f, pos).is_ok());
  EXPECT_LE(rel_err(dx.download(), back), tol<A>(1e-6, 2e-2)) << "rope backward at chunk positions";
  EXPECT_EQ(device_error(), "");
}
TEST(CudaContextParallel, RopePositionsF32) { PARTRAIN_REQUIRE_GPU(); check_rope_positions<float>(); }
TEST(CudaContextParallel, RopePositionsBF16) { PARTRAIN_REQUIRE_GPU(); check_rope_positions<bf16>(); }

}  // namespace
}  // namespace partrain::gputest
