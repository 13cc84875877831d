// Context-parallel attention kernels (engine/cpu/attention_block.cc) against the one-rank
// kernels and finite differences: every cp rank's queries, attended block by block to every
// rank's keys and merged with their log-sum-exp, give the whole sequence's attention
// (attention_forward, itself checked against finite differences and PyTorch) at their
// positions, in any block order; the blocks' backward, summed back on the ranks that hold
// the keys, gives attention_backward's dq, dk, dv; the merged output's finite differences
// agree with the block backward; RoPE at chunk positions equals the whole sequence's rows.
// The positions arithmetic (engine/positions.h) by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/cpu/kernels.h"
#include "engine/positions.h"

namespace partrain::engine::cpu {
namespace {

using Vec = std::vector<float>;

Vec random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  Vec v(n);
  for (float& x : v) x = d(gen);
  return v;
}

TEST(ContextPositions, ChunksByHand) {
  // T = 16 on cp2: chunks of 4; rank 0 holds 0-3 and 12-15, rank 1 holds 4-7 and 8-11.
  const SeqPositions r0 = context_positions(16, 0, 2), r1 = context_positions(16, 1, 2);
  const int want0[] = {0, 1, 2, 3, 12, 13, 14, 15}, want1[] = {4, 5, 6, 7, 8, 9, 10, 11};
  for (int t = 0; t < 8; ++t) {
    EXPECT_EQ(r0.at(t), want0[t]);
    EXPECT_EQ(r1.at(t), want1[t]);
  }
  // Keys of rank 0 seen by a query at position 9: 0-3 (four), none of 12-15.
  EXPECT_EQ(r0.count_upto(9, 8), 4);
  EXPECT_EQ(r0.count_upto(13, 8), 6);
  EXPECT_EQ(r1.count_upto(3, 8), 0);
  EXPECT_EQ(r1.count_upto(100, 8), 8);
  // One rank: the whole sequence.
  const SeqPositions whole = context_positions(16, 0, 1);
  EXPECT_TRUE(whole.whole());
  EXPECT_EQ(whole.at(11), 11);
  EXPECT_EQ(whole.count_upto(5, 16), 6);
  EXPECT_EQ(whole.count_upto(-1, 16), 0);
}

// The worked example of attention_block.cc: one query (hd 1, q = 1) over two blocks of one
// key each, scores 0 and log 3, values 1 and 3: lse log 4, out 2.5.
TEST(ContextAttention, MergeOfTwoBlocksByHand) {
  SeqPositions q_pos, k0, k1;
  q_pos.run = k0.run = k1.run = 1;
  q_pos.first[0] = 1, k0.first[0] = 0, k1.first[0] = 1;  // one row each: the second chunk unused
  q_pos.first[1] = k0.first[1] = k1.first[1] = 99;
  float out = 0.0f, lse = -INFINITY;
  const float q = 1.0f, ka = 0.0f, va = 1.0f, kb = std::log(3.0f), vb = 3.0f;
  AttentionBlockShape s{1, 1, 1, 1, 1, 1, 1, 1, q_pos, k0};
  attention_block_forward(&out, &lse, &q, &ka, &va, s);
  EXPECT_FLOAT_EQ(out, 1.0f);
  EXPECT_NEAR(lse, 0.0f, 1e-7);
  s.k_pos = k1;
  attention_block_forward(&out, &lse, &q, &kb, &vb, s);
  EXPECT_NEAR(out, 2.5f, 1e-6);
  EXPECT_NEAR(lse, std::log(4.0f), 1e-6);
  // A block whose keys all come later changes nothing.
  SeqPositions later = k1;
  later.first[0] = 5;
  s.k_pos = later;
  attention_block_forward(&out, &lse, &q, &kb, &vb, s);
  EXPECT_NEAR(out, 2.5f, 1e-6);
}

// A whole problem ([B, T] sequences, packed q/k/v as the model keeps them) and its split
// over cp ranks: rank i's rows are the positions context_positions(T, i, cp) says.
struct Problem {
  int B, T, H, KV, hd, cp;
  int W() const { return (H + 2 * KV) * hd; }
  Vec qkv;  // [B, T, W]
};

// Rows of the whole [B, T, cols] array x held by cp rank i, packed [B, T/cp, cols].
Vec rows_of(const Problem& p, const Vec& x, int cols, int i) {
  const SeqPositions at = context_positions(p.T, i, p.cp);
  const int Tl = p.T / p.cp;
  Vec out(static_cast<size_t>(p.B) * Tl * cols);
  for (int b = 0; b < p.B; ++b)
    for (int t = 0; t < Tl; ++t)
      std::copy_n(&x[(static_cast<size_t>(b) * p.T + at.at(t)) * cols], cols,
                  &out[(static_cast<size_t>(b) * Tl + t) * cols]);
  return out;
}

// Adds the local [B, T/cp, cols] array back at rank i's rows of the whole array.
void add_rows(const Problem& p, const Vec& local, int cols, int i, Vec* whole) {
  const SeqPositions at = context_positions(p.T, i, p.cp);
  const int Tl = p.T / p.cp;
  for (int b = 0; b < p.B; ++b)
    for (int t = 0; t < Tl; ++t)
      for (int c = 0; c < cols; ++c)
        (*whole)[(static_cast<size_t>(b) * p.T + at.at(t)) * cols + c] +=
            local[(static_cast<size_t>(b) * Tl + t) * cols + c];
}

// Every rank's merged output and lse (in the whole layout: out [B, T, H hd], lse [B, H, T]),
// the blocks taken in the ring's order (rank i, i-1, ...) or the reverse.
void cp_forward(const Problem& p, const Vec& qkv, bool reverse, Vec* out, Vec* lse) {
  const int Tl = p.T / p.cp, W = p.W(), O = p.H * p.hd;
  out->assign(static_cast<size_t>(p.B) * p.T * O, 0.0f);
  lse->assign(static_cast<size_t>(p.B) * p.H * p.T, 0.0f);
  std::vector<Vec> local(static_cast<size_t>(p.cp));
  for (int i = 0; i < p.cp; ++i) local[static_cast<size_t>(i)] = rows_of(p, qkv, W, i);
  for (int i = 0; i < p.cp; ++i) {
    Vec o(static_cast<size_t>(p.B) * Tl * O, 0.0f), l(static_cast<size_t>(p.B) * p.H * Tl, -INFINITY);
    for (int step = 0; step < p.cp; ++step) {
      const int s = reverse ? (i + 1 + step) % p.cp : (i - step + p.cp) % p.cp;
      const Vec& src = local[static_cast<size_t>(s)];
      const AttentionBlockShape sh{p.B, Tl, Tl, p.H, p.KV, p.hd, W, W,
                                   context_positions(p.T, i, p.cp), context_positions(p.T, s, p.cp)};
      attention_block_forward(o.data(), l.data(), local[static_cast<size_t>(i)].data(), src.data() + p.H * p.hd,
                              src.data() + (p.H + p.KV) * p.hd, sh);
    }
    add_rows(p, o, O, i, out);
    const SeqPositions at = context_positions(p.T, i, p.cp);
    for (int b = 0; b < p.B; ++b)
      for (int h = 0; h < p.H; ++h)
        for (int t = 0; t < Tl; ++t)
          (*lse)[(static_cast<size_t>(b) * p.H + h) * p.T + at.at(t)] = l[(static_cast<size_t>(b) * p.H + h) * Tl + t];
  }
}

// Every rank's backward through every block, dK/dV summed on the rank holding the keys,
// assembled in the whole layout as dqkv [B, T, W].
Vec cp_backward(const Problem& p, const Vec& qkv, const Vec& dout, const Vec& out, const Vec& lse) {
  const int Tl = p.T / p.cp, W = p.W(), O = p.H * p.hd;
  Vec dqkv(qkv.size(), 0.0f);
  std::vector<Vec> local(static_cast<size_t>(p.cp)), dlocal(static_cast<size_t>(p.cp));
  for (int i = 0; i < p.cp; ++i) {
    local[static_cast<size_t>(i)] = rows_of(p, qkv, W, i);
    dlocal[static_cast<size_t>(i)].assign(local[static_cast<size_t>(i)].size(), 0.0f);
  }
  for (int i = 0; i < p.cp; ++i) {
    const Vec o = rows_of(p, out, O, i), d = rows_of(p, dout, O, i);
    const SeqPositions at = context_positions(p.T, i, p.cp);
    Vec l(static_cast<size_t>(p.B) * p.H * Tl);
    for (int b = 0; b < p.B; ++b)
      for (int h = 0; h < p.H; ++h)
        for (int t = 0; t < Tl; ++t)
          l[(static_cast<size_t>(b) * p.H + h) * Tl + t] = lse[(static_cast<size_t>(b) * p.H + h) * p.T + at.at(t)];
    for (int s = 0; s < p.cp; ++s) {
      const Vec& src = local[static_cast<size_t>(s)];
      float* dsrc = dlocal[static_cast<size_t>(s)].data();
      const AttentionBlockShape sh{p.B, Tl, Tl, p.H, p.KV, p.hd, W, W, at, context_positions(p.T, s, p.cp)};
      attention_block_backward(dlocal[static_cast<size_t>(i)].data(), dsrc + p.H * p.hd, dsrc + (p.H + p.KV) * p.hd,
                               d.data(), o.data(), l.data(), local[static_cast<size_t>(i)].data(),
                               src.data() + p.H * p.hd, src.data() + (p.H + p.KV) * p.hd, sh);
    }
  }
  for (int i = 0; i < p.cp; ++i) add_rows(p, dlocal[static_cast<size_t>(i)], W, i, &dqkv);
  return dqkv;
}

float max_abs(const Vec& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

void expect_close(const std::string& what, const Vec& got, const Vec& want, float rel) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const float tol = rel * std::max(1.0f, max_abs(want));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol) << what << "[" << i << "]";
  }
}

void check_against_one_rank(const Problem& p) {
  SCOPED_TRACE("cp" + std::to_string(p.cp) + " B" + std::to_string(p.B) + " T" + std::to_string(p.T));
  const int W = p.W(), O = p.H * p.hd;
  const float* q = p.qkv.data();
  Vec out1(static_cast<size_t>(p.B) * p.T * O), lse1(static_cast<size_t>(p.B) * p.H * p.T);
  attention_forward(out1.data(), lse1.data(), q, q + p.H * p.hd, q + (p.H + p.KV) * p.hd, p.B, p.T, p.H, p.KV,
                    p.hd, W, W);
  Vec out, lse, out_rev, lse_rev;
  cp_forward(p, p.qkv, false, &out, &lse);
  cp_forward(p, p.qkv, true, &out_rev, &lse_rev);
  expect_close("out", out, out1, 1e-6f);
  expect_close("lse", lse, lse1, 1e-6f);
  expect_close("out, blocks in reverse", out_rev, out1, 1e-6f);
  const Vec dout = random_vec(out1.size(), 77);
  Vec dqkv1(p.qkv.size(), 0.0f);
  attention_backward(dqkv1.data(), dqkv1.data() + p.H * p.hd, dqkv1.data() + (p.H + p.KV) * p.hd, dout.data(),
                     out1.data(), lse1.data(), q, q + p.H * p.hd, q + (p.H + p.KV) * p.hd, p.B, p.T, p.H, p.KV, p.hd,
                     W, W);
  expect_close("dqkv", cp_backward(p, p.qkv, dout, out, lse), dqkv1, 1e-5f);
}

TEST(ContextAttention, BlocksEqualTheWholeSequenceCp2Cp4Gqa) {
  for (int cp : {2, 4}) {
    Problem p{2, 16, 4, 2, 4, cp, {}};
    p.qkv = random_vec(static_cast<size_t>(p.B) * p.T * p.W(), 5 + static_cast<uint32_t>(cp));
    check_against_one_rank(p);
  }
  // Plain multi-head (KV = H) and one query head per group.
  Problem mha{1, 8, 2, 2, 4, 2, {}};
  mha.qkv = random_vec(static_cast<size_t>(mha.T) * mha.W(), 9);
  check_against_one_rank(mha);
}

// Enough (batch, kv head) pairs that the block backward takes its single-pass branch.
TEST(ContextAttention, SinglePassBackwardEqualsTheWholeSequence) {
  Problem p{8, 8, 4, 2, 2, 2, {}};
  p.qkv = random_vec(static_cast<size_t>(p.B) * p.T * p.W(), 21);
  check_against_one_rank(p);
}

// Finite differences of L = sum(out . R) over the merged cp2 output, against the block
// backward (GQA, two sequences).
TEST(ContextAttention, FiniteDifferencesOfTheMergedOutput) {
  Problem p{2, 8, 4, 2, 2, 2, {}};
  p.qkv = random_vec(static_cast<size_t>(p.B) * p.T * p.W(), 31);
  const Vec R = random_vec(static_cast<size_t>(p.B) * p.T * p.H * p.hd, 32);
  Vec out, lse;
  auto objective = [&] {
    cp_forward(p, p.qkv, false, &out, &lse);
    double s = 0;
    for (size_t i = 0; i < out.size(); ++i) s += static_cast<double>(out[i]) * R[i];
    return s;
  };
  objective();
  const Vec analytic = cp_backward(p, p.qkv, R, out, lse);
  const double eps = 1e-2;
  for (size_t i = 0; i < p.qkv.size(); ++i) {
    const float orig = p.qkv[i];
    p.qkv[i] = orig + static_cast<float>(eps);
    const double up = objective();
    p.qkv[i] = orig - static_cast<float>(eps);
    const double down = objective();
    p.qkv[i] = orig;
    const double fd = (up - down) / (2 * eps);
    ASSERT_NEAR(analytic[i], fd, 2e-3 + 1e-2 * std::fabs(fd)) << "dqkv[" << i << "]";
  }
}

// RoPE on a cp rank's rows at their chunk positions equals the whole sequence's rotation
// of those rows; backward likewise.
TEST(ContextAttention, RopeAtChunkPositions) {
  const int B = 2, T = 16, heads = 2, hd = 4, stride = 10, cp = 4;
  Problem p{B, T, 1, 1, 1, cp, {}};
  const Vec x = random_vec(static_cast<size_t>(B) * T * stride, 51);
  Vec whole(x.size());
  rope_forward(whole.data(), x.data(), B, T, heads, hd, stride, 10000.0f);
  Vec back(x.size());
  rope_backward(back.data(), x.data(), B, T, heads, hd, stride, 10000.0f);
  for (int i = 0; i < cp; ++i) {
    const Vec mine = rows_of(p, x, stride, i);
    Vec y(mine.size()), d(mine.size());
    rope_forward(y.data(), mine.data(), B, T / cp, heads, hd, stride, 10000.0f, context_positions(T, i, cp));
    rope_backward(d.data(), mine.data(), B, T / cp, heads, hd, stride, 10000.0f, context_positions(T, i, cp));
    const Vec want = rows_of(p, whole, stride, i), want_back = rows_of(p, back, stride, i);
    for (size_t r = 0; r < y.size() / stride; ++r) {
      for (int c = 0; c < heads * hd; ++c) {
        EXPECT_EQ(y[r * stride + c], want[r * stride + c]) << "rank " << i << " row " << r;
        EXPECT_EQ(d[r * stride + c], want_back[r * stride + c]) << "rank " << i << " row " << r;
      }
    }
  }
}

TEST(ContextAttention, CopyColumnsPacksAndUnpacks) {
  // Rows of 5 with the columns 2..4 wanted: [r*5+2, r*5+3, r*5+4] packed as rows of 3.
  Vec src(15);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  Vec packed(9, -1.0f);
  copy_columns(packed.data(), 3, src.data() + 2, 5, 3, 3);
  EXPECT_EQ(packed, (Vec{2, 3, 4, 7, 8, 9, 12, 13, 14}));
  Vec back(15, 0.0f);
  copy_columns(back.data() + 2, 5, packed.data(), 3, 3, 3);
  EXPECT_EQ(back, (Vec{0, 0, 2, 3, 4, 0, 0, 7, 8, 9, 0, 0, 12, 13, 14}));
}

}  // namespace
}  // namespace partrain::engine::cpu
