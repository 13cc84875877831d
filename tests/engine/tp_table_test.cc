// The tensor-parallel parameter table (engine/model/params.h, tensor_parallel.h): over the
// ranks of a group, every split tensor's pieces cover its logical tensor exactly once, the
// replicated ones are whole on every rank; each rank's initial values are the single-rank
// values at the logical indices; the checkpoint pieces (shard_pieces) name logical ranges.
#include <gtest/gtest.h>

#include <vector>

#include "engine/model/params.h"
#include "engine/model/sharding.h"
#include "tiny_models.h"

namespace partrain::engine::model {
namespace {

// T 8, at the engine's default init.
ModelOptions tiny(Arch arch) { return engine::testing::tiny(arch, {.seq_len = 8, .init_std = 0.02f}); }

void check_cover_and_init(const ModelOptions& o, int tp) {
  const ParamTable whole = build_param_table(o);
  std::vector<float> ref(static_cast<size_t>(whole.total()));
  init_params(whole, 7, ref.data());
  // hits[i][j]: how many ranks hold element j of logical tensor i.
  std::vector<std::vector<int>> hits(whole.specs().size());
  for (size_t i = 0; i < hits.size(); ++i) hits[i].assign(static_cast<size_t>(whole.specs()[i].numel()), 0);
  for (int r = 0; r < tp; ++r) {
    const ParamTable t = build_param_table(o, TensorOptions{r, tp, true});
    ASSERT_EQ(t.specs().size(), whole.specs().size());
    std::vector<float> mine(static_cast<size_t>(t.total()));
    init_params(t, 7, mine.data());
    for (size_t i = 0; i < t.specs().size(); ++i) {
      const ParamSpec& p = t.specs()[i];
      const ParamSpec& w = whole.specs()[i];
      ASSERT_EQ(p.name, w.name);
      EXPECT_EQ(p.logical.numel(), w.numel()) << p.name;
      int64_t local = 0;
      auto visit = [&](int64_t logical) {
        hits[i][static_cast<size_t>(logical)] += 1;
        EXPECT_EQ(mine[static_cast<size_t>(p.offset + local)], ref[static_cast<size_t>(w.offset + logical)])
            << p.name << " rank " << r << " element " << local;
        ++local;
      };
      if (p.split()) {
        for (const ParamSpec::Piece& piece : p.pieces) {
          for (int64_t j = 0; j < piece.count; ++j) visit(piece.begin + j);
        }
      } else {
        for (int64_t j = 0; j < p.numel(); ++j) visit(j);
      }
      EXPECT_EQ(local, p.numel()) << p.name;
    }
  }
  const ParamTable rank0 = build_param_table(o, TensorOptions{0, tp, true});
  for (size_t i = 0; i < hits.size(); ++i) {
    const ParamSpec& w = whole.specs()[i];
    // Split tensors once over the group; replicated ones on every rank.
    const ParamSpec& p0 = rank0.specs()[i];
    const int want = p0.split() ? 1 : tp;
    for (size_t j = 0; j < hits[i].size(); ++j) {
      ASSERT_EQ(hits[i][j], want) << w.name << " element " << j;
    }
  }
}

TEST(TensorParallelTable, Gpt2PiecesCoverOnceAndInitEqualsOneRank) {
  check_cover_and_init(tiny(Arch::kGpt2), 2);
  check_cover_and_init(tiny(Arch::kGpt2), 4);
}

TEST(TensorParallelTable, LlamaGqaPiecesCoverOnceAndInitEqualsOneRank) {
  check_cover_and_init(tiny(Arch::kLlama), 2);
  ModelOptions o = tiny(Arch::kLlama);
  o.tie_embeddings = true;
  check_cover_and_init(o, 2);
}

TEST(TensorParallelTable, WhatIsSplitAndHow) {
  // GPT-2, C 16, F 64, V 19 on tp 2: c_attn [48, 16] keeps q, k and v rows 0..7 of 16 each.
  const ParamTable t = build_param_table(tiny(Arch::kGpt2), TensorOptions{1, 2, true});
  const ParamSpec& qkv = t.specs()[static_cast<size_t>(t.find("h.0.attn.c_attn.weight"))];
  EXPECT_EQ(qkv.shape[0], 24);
  ASSERT_EQ(qkv.pieces.size(), 3u);
  EXPECT_EQ(qkv.pieces[0].begin, 8 * 16);   // q rows 8..15
  EXPECT_EQ(qkv.pieces[1].begin, 24 * 16);  // k rows 24..31
  EXPECT_EQ(qkv.pieces[2].begin, 40 * 16);  // v rows 40..47
  const ParamSpec& proj = t.specs()[static_cast<size_t>(t.find("h.0.mlp.c_proj.weight"))];
  EXPECT_EQ(proj.shape[0], 16);  // [C, F/2]: columns 32..63 of each of the 16 rows
  EXPECT_EQ(proj.shape[1], 32);
  ASSERT_EQ(proj.pieces.size(), 16u);
  EXPECT_EQ(proj.pieces[1].begin, 64 + 32);
  const ParamSpec& wte = t.specs()[static_cast<size_t>(t.find("wte.weight"))];
  EXPECT_EQ(wte.shape[0], 9);  // rows 10..18 of 19 (ceil(19/2) = 10 on rank 0)
  EXPECT_EQ(wte.pieces[0].begin, 10 * 16);
  EXPECT_FALSE(t.specs()[static_cast<size_t>(t.find("h.0.attn.c_proj.bias"))].split());
  EXPECT_FALSE(t.specs()[static_cast<size_t>(t.find("wpe.weight"))].split());
  // A checkpoint range over the row-parallel weight names one logical run per row.
  const std::vector<ShardPiece> pieces = shard_pieces(t, proj.offset, proj.offset + 40);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].name, "h.0.mlp.c_proj.weight");
  EXPECT_EQ(pieces[0].shape[1], 64);  // the logical shape
  EXPECT_EQ(pieces[0].begin, 32);
  EXPECT_EQ(pieces[0].end, 64);
  EXPECT_EQ(pieces[1].begin, 64 + 32);
  EXPECT_EQ(pieces[1].end, 64 + 40);
  EXPECT_EQ(pieces[1].flat_offset, proj.offset + 32);
}

}  // namespace
}  // namespace partrain::engine::model
