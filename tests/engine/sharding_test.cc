// ZeRO inside the engine (engine/model/sharding.h) on one rank: the shard pieces a
// checkpoint addresses, by hand; and a model whose gradients (stage 2) or parameters too
// (stage 3) live in recycled slots trains exactly as the flat model does, through a
// one-rank ShardComm that does what the group would (the average over one rank is the
// data itself): same losses and parameters over several AdamW steps with gradient
// accumulation, tied and untied heads, with and without full recompute.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/backend.h"
#include "engine/model/model.h"
#include "engine/train/optimizer.h"
#include "tiny_models.h"

namespace partrain::engine::model {
namespace {

// Three blocks at the engine's default init.
ModelOptions tiny(Arch arch) { return engine::testing::tiny(arch, {.layers = 3, .init_std = 0.02f}); }

TEST(ShardPieces, CutTheTableWhereTheShardEnds) {
  // GPT-2, V 19, T 6, C 16: wte [19, 16] = 304 elements at 0, wpe [6, 16] = 96 at 304,
  // h.0.ln_1.weight [16] at 400, h.0.ln_1.bias at 416.
  const ParamTable t = build_param_table(tiny(Arch::kGpt2));
  const std::vector<ShardPiece> p = shard_pieces(t, 300, 410);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].name, "wte.weight");
  EXPECT_EQ(p[0].begin, 300);
  EXPECT_EQ(p[0].end, 304);
  EXPECT_EQ(p[0].flat_offset, 300);
  EXPECT_EQ(p[0].shape.numel(), 304);
  EXPECT_EQ(p[1].name, "wpe.weight");
  EXPECT_EQ(p[1].begin, 0);
  EXPECT_EQ(p[1].end, 96);
  EXPECT_EQ(p[1].flat_offset, 304);
  EXPECT_EQ(p[2].name, "h.0.ln_1.weight");
  EXPECT_EQ(p[2].begin, 0);
  EXPECT_EQ(p[2].end, 10);
  EXPECT_EQ(p[2].flat_offset, 400);
  EXPECT_TRUE(shard_pieces(t, 5, 5).empty());
  // Shards covering the buffer give every element of every tensor exactly once.
  int64_t covered = 0;
  for (int64_t lo = 0; lo < t.total(); lo += 1000) {
    for (const ShardPiece& q : shard_pieces(t, lo, std::min(t.total(), lo + 1000))) covered += q.end - q.begin;
  }
  EXPECT_EQ(covered, t.total());
}

// The worked example of shard_views.h, by hand: [wte 10][router 2][experts 8][ln_f 2].
ParamTable example_table() {
  ParamTable t;
  t.add("wte.weight", {10}, Init::kZeros, 0, false);
  t.add("h.0.mlp.router.weight", {2}, Init::kZeros, 0, false);
  t.mark_expert(t.add("h.0.mlp.experts.0.c_fc.weight", {8}, Init::kZeros, 0, false));
  t.add("ln_f.weight", {2}, Init::kZeros, 0, true);
  return t;
}

TEST(PartViews, ExpertsFormTheirOwnViewUnderEp) {
  const ParamTable t = example_table();
  const PartViews v(t, true);
  EXPECT_EQ(v.size(View::kDense), 14);
  EXPECT_EQ(v.size(View::kExperts), 8);
  ASSERT_EQ(v.runs().size(), 3u);
  EXPECT_EQ(v.runs()[0].view, View::kDense);  // wte + router: flat 0..11 = view 0..11
  EXPECT_EQ(v.runs()[0].count, 12);
  EXPECT_EQ(v.runs()[1].view, View::kExperts);
  EXPECT_EQ(v.runs()[1].flat, 12);
  EXPECT_EQ(v.runs()[1].at, 0);
  EXPECT_EQ(v.runs()[2].flat, 20);  // ln_f: view 12..13
  EXPECT_EQ(v.runs()[2].at, 12);
  EXPECT_EQ(v.view_offset(t.specs()[3]), 12);
  EXPECT_EQ(v.view_of(t.specs()[2]), View::kExperts);
  // dp rank 1 of dp2 owns dense [7, 14): flat [7, 12) and [20, 22); expert-dp rank 0 of 2
  // owns experts [0, 4): flat [12, 16).
  EXPECT_EQ(v.flat_ranges(View::kDense, 7, 14), (std::vector<FlatRange>{{7, 12}, {20, 22}}));
  EXPECT_EQ(v.flat_ranges(View::kExperts, 0, 4), (std::vector<FlatRange>{{12, 16}}));
  EXPECT_TRUE(v.flat_ranges(View::kDense, 14, 20).empty());
  // A segment crossing both views, cut into its runs' pieces.
  const std::vector<ViewRun> p = v.pieces(10, 21);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].at, 10);
  EXPECT_EQ(p[0].count, 2);
  EXPECT_EQ(p[1].view, View::kExperts);
  EXPECT_EQ(p[1].count, 8);
  EXPECT_EQ(p[2].at, 12);
  EXPECT_EQ(p[2].count, 1);
  // The shard buffers hold the ranges dense first: [7, 12) at 0, [20, 22) at 5, [12, 16) at 7.
  ShardOptions sh{1, {{7, 12}, {20, 22}, {12, 16}}, 1};
  const std::vector<ShardOptions::Run> runs = sh.runs();
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[1].at, 5);
  EXPECT_EQ(runs[2].at, 7);
  EXPECT_EQ(sh.numel(), 11);
}

TEST(PartViews, OneViewWithoutEp) {
  const ParamTable t = example_table();
  const PartViews v(t, false);
  EXPECT_EQ(v.size(View::kDense), 22);
  EXPECT_EQ(v.size(View::kExperts), 0);
  ASSERT_EQ(v.runs().size(), 1u);
  EXPECT_EQ(v.flat_ranges(View::kDense, 3, 15), (std::vector<FlatRange>{{3, 15}}));
  EXPECT_EQ(v.view_offset(t.specs()[2]), 12);
}

// What a one-rank data-parallel group does (CPU backend: tensors are host memory).
class OneRankComm final : public ShardComm {
 public:
  explicit OneRankComm(int64_t begin) : begin_(begin) {}
  void reduce_grads(const Tensor& data, int64_t offset, const Tensor& shard) override {
    float* s = shard.ptr<float>();
    const int64_t hi = std::min(offset + data.numel(), begin_ + shard.numel());
    for (int64_t i = std::max(offset, begin_); i < hi; ++i) s[i - begin_] += data.ptr<float>()[i - offset];
    ++reduces;
  }
  void release_grads(int64_t, int64_t) override {}
  void gather_params(const Tensor& shard, const Tensor& dst, int64_t offset) override {
    std::memcpy(dst.ptr<float>(), shard.ptr<float>() + (offset - begin_), dst.bytes());
    ++gathers;
  }
  void wait_params(const Tensor&) override {}
  double sum(double x) override { return x; }
  int reduces = 0, gathers = 0;

 private:
  int64_t begin_;
};

struct TrainRun {
  std::vector<float> losses, params, grads;  // grads: the first step's accumulated gradient
  int reduces = 0, gathers = 0;
};

// Three AdamW steps of two micro-batches each.
TrainRun train(const ModelOptions& o, int stage, int prefetch) {
  std::unique_ptr<Backend> be = make_cpu_backend();
  const int64_t n = build_param_table(o).total();
  ShardOptions sh{stage, {{0, n}}, prefetch};
  auto m = Model::create(o, be.get(), 2, 7, sh);
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  OneRankComm comm(0);
  if (stage > 0) (*m)->set_shard_comm(&comm);
  TrainOptions t;
  t.lr = 1e-2f;
  t.warmup_steps = 0;
  t.steps = 3;
  auto opt = train::AdamW::create(m->get(), t);
  EXPECT_TRUE(opt.is_ok());
  std::mt19937 gen(3);
  std::uniform_int_distribution<int> tok(0, o.vocab_size - 1);
  TrainRun r;
  for (int step = 0; step < 3; ++step) {
    (*m)->zero_grads();
    for (int k = 0; k < 2; ++k) {
      std::vector<int32_t> in(12), tgt(12);
      for (int i = 0; i < 12; ++i) in[i] = tok(gen), tgt[i] = tok(gen);
      auto loss = (*m)->forward({in.data(), tgt.data(), 2, static_cast<uint64_t>(k * 2), step});
      EXPECT_TRUE(loss.is_ok());
      r.losses.push_back(loss->loss);
      (*m)->backward(0.5f);
    }
    // Stage 1 keeps the flat gradient; the strategy reduces it into the shard once per step.
    if (stage == 1) comm.reduce_grads((*m)->grads(), 0, (*m)->shard_grads());
    if (step == 0) {
      r.grads.resize(static_cast<size_t>(n));
      be->to_host(r.grads.data(), (*m)->shard_grads());
    }
    (*opt)->step(1e-2f);
  }
  r.params = (*m)->params_to_host();
  r.reduces = comm.reduces;
  r.gathers = comm.gathers;
  opt->reset();
  return r;
}

void expect_same(const TrainRun& a, const TrainRun& b, const char* what) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_NEAR(a.losses[i], b.losses[i], 1e-6f * std::fabs(b.losses[i])) << what << " loss " << i;
  }
  // The gradient: equal but for the order of the micro-batch sums (fp32 rounding).
  ASSERT_EQ(a.grads.size(), b.grads.size());
  double scale = 0, worst = 0;
  for (size_t i = 0; i < a.grads.size(); ++i) {
    scale = std::max(scale, std::fabs(static_cast<double>(b.grads[i])));
    worst = std::max(worst, std::fabs(static_cast<double>(a.grads[i]) - b.grads[i]));
  }
  EXPECT_LT(worst, 1e-6 * scale) << what << " gradient";
  // The weights after three steps. AdamW's m / sqrt(v) turns rounding-level differences of
  // near-zero gradients into up to lr-sized ones, so the bound is a fraction of lr (1e-2).
  ASSERT_EQ(a.params.size(), b.params.size());
  worst = 0;
  for (size_t i = 0; i < a.params.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(a.params[i]) - b.params[i]));
  EXPECT_LT(worst, 1e-4) << what << " weights";
}

TEST(ShardedModel, SlotsTrainAsTheFlatBuffers) {
  for (Arch arch : {Arch::kGpt2, Arch::kLlama}) {
    for (Recompute rc : {Recompute::kNone, Recompute::kFull}) {
      ModelOptions o = tiny(arch);
      o.recompute = rc;
      const TrainRun flat = train(o, 0, 0);
      const TrainRun z1 = train(o, 1, 0);
      const TrainRun z2 = train(o, 2, 0);
      expect_same(z1, flat, "stage 1");
      expect_same(z2, flat, "stage 2");
      // Every segment (3 blocks, tail, embeddings) reduced once per micro-batch.
      EXPECT_EQ(z2.reduces, 3 * 2 * (o.layers + 2));
      for (int prefetch : {0, 1, 5}) {
        const TrainRun z3 = train(o, 3, prefetch);
        expect_same(z3, flat, "stage 3");
        // Per micro-batch: the two edges, each block in forward and again in backward.
        EXPECT_EQ(z3.gathers, 3 * 2 * (2 + 2 * o.layers)) << "prefetch " << prefetch;
      }
    }
  }
}

TEST(ShardedModel, StagesNeedAShardInsideTheBuffer) {
  std::unique_ptr<Backend> be = make_cpu_backend();
  auto m = Model::create(tiny(Arch::kGpt2), be.get(), 1, 1, ShardOptions{2, {{10, 5}}, 1});
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("ZeRO shard range [10, 5) is not inside"), std::string::npos)
      << m.status().message();
  // Two ranges may not overlap.
  m = Model::create(tiny(Arch::kGpt2), be.get(), 1, 1, ShardOptions{1, {{100, 200}, {0, 101}}, 1});
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("overlaps another"), std::string::npos) << m.status().message();
}

}  // namespace
}  // namespace partrain::engine::model
