// The stage partition against costs worked out by hand from partition.h's formulas.
#include <gtest/gtest.h>

#include "pipeline/partition.h"

namespace partrain::pipeline {
namespace {

// gpt2, C=64, T=32, V=4096, F=256, H=kv=4:
//   block = 4*64^2 + 4*64*64 + 4*32*64 + 4*64*256 = 16384+16384+8192+65536 = 106496
//   embedding = 2*64 = 128, head = 2*64*4096 = 524288
engine::ModelOptions big_vocab(int layers) {
  engine::ModelOptions m;
  m.hidden = 64;
  m.seq_len = 32;
  m.vocab_size = 4096;
  m.ffn_hidden = 256;
  m.heads = 4;
  m.kv_heads = 4;
  m.layers = layers;
  return m;
}

TEST(Partition, PieceCostsByHand) {
  Result<std::vector<PieceCost>> p = piece_costs(big_vocab(4));
  ASSERT_TRUE(p) << p.status().message();
  ASSERT_EQ(p->size(), 6u);
  EXPECT_EQ((*p)[0].name, "embedding");
  EXPECT_DOUBLE_EQ((*p)[0].flops, 128);
  EXPECT_EQ((*p)[1].name, "block 0");
  EXPECT_DOUBLE_EQ((*p)[1].flops, 106496);
  EXPECT_DOUBLE_EQ((*p)[5].flops, 524288);
}

TEST(Partition, LlamaWithExpertsByHand) {
  // llama C=64 T=16 H=4 kv=2 F=192: attention 4*4096 + 4*64*32 + 4*16*64 = 28672,
  // MLP 6*64*192 = 73728; MoE blocks (E=4, k=2, every 2nd: blocks 1, 3):
  // router 2*64*4 = 512 + 2*73728 -> 28672 + 147968 = 176640.
  engine::ModelOptions m;
  m.arch = engine::Arch::kLlama;
  m.hidden = 64;
  m.seq_len = 16;
  m.heads = 4;
  m.kv_heads = 2;
  m.ffn_hidden = 192;
  m.layers = 4;
  m.moe_experts = 4;
  m.moe_top_k = 2;
  m.moe_every = 2;
  Result<std::vector<PieceCost>> p = piece_costs(m);
  ASSERT_TRUE(p) << p.status().message();
  EXPECT_DOUBLE_EQ((*p)[1].flops, 102400);
  EXPECT_DOUBLE_EQ((*p)[2].flops, 176640);
  EXPECT_DOUBLE_EQ((*p)[3].flops, 102400);
  EXPECT_DOUBLE_EQ((*p)[4].flops, 176640);
}

TEST(Partition, HeavyHeadGetsFewerBlocksThanLayerCountWouldGive) {
  // Two stages: [2|2] costs max(213120, 737280); [3|1] max(319616, 630784) is the best.
  Result<std::vector<StagePart>> parts = partition_stages(*piece_costs(big_vocab(4)), 2);
  ASSERT_TRUE(parts) << parts.status().message();
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ((*parts)[0].first_block, 0);
  EXPECT_EQ((*parts)[0].end_block, 3);
  EXPECT_TRUE((*parts)[0].embedding);
  EXPECT_FALSE((*parts)[0].head);
  EXPECT_DOUBLE_EQ((*parts)[0].flops, 319616);
  EXPECT_EQ((*parts)[1].first_block, 3);
  EXPECT_TRUE((*parts)[1].head);
  EXPECT_DOUBLE_EQ((*parts)[1].flops, 630784);
  // 319616 / 950400 = 33.6%, 630784 / 950400 = 66.4%, 630784 / 475200 = 1.327.
  EXPECT_EQ(describe_partition(*parts, 2),
            "stage 0 (rank 0, chunk 0): embedding + blocks 0-2, 0.3196 MFLOP/token (33.6%)\n"
            "stage 1 (rank 1, chunk 0): block 3 + head, 0.6308 MFLOP/token (66.4%)\n"
            "imbalance: largest stage 1.327x the mean\n");
}

TEST(Partition, TiesGiveEarlierStagesMoreBlocks) {
  // Three stages: [1,2,1] and [2,1,1] both peak at 630784 (block 3 + head); the earlier
  // stage takes two blocks.
  Result<std::vector<StagePart>> parts = partition_stages(*piece_costs(big_vocab(4)), 3);
  ASSERT_TRUE(parts);
  EXPECT_EQ((*parts)[0].end_block, 2);
  EXPECT_EQ((*parts)[1].end_block, 3);
  EXPECT_EQ((*parts)[2].end_block, 4);
}

TEST(Partition, UniformBlocksSplitEvenlyWhenEndsAreCheap) {
  // Vocabulary 2 makes the head 2*64*2 = 256 and the embedding 128: 8 blocks over 4 stages
  // go 2-2-2-2 (any other split puts 3 blocks somewhere).
  engine::ModelOptions m = big_vocab(8);
  m.vocab_size = 2;
  Result<std::vector<StagePart>> parts = partition_stages(*piece_costs(m), 4);
  ASSERT_TRUE(parts);
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ((*parts)[s].first_block, 2 * s);
    EXPECT_EQ((*parts)[s].end_block, 2 * s + 2);
  }
  EXPECT_EQ(describe_partition(*parts, 2).substr(0, 26), "stage 0 (rank 0, chunk 0):");
  EXPECT_NE(describe_partition(*parts, 2).find("stage 3 (rank 1, chunk 1)"), std::string::npos);
}

TEST(Partition, TheJobsOwnSplitIsTakenAsGiven) {
  // 7 blocks as [1, 2, 3, 1]: stage 0 has the embedding and block 0, stage 3 block 6 and the
  // head; the FLOPs are the pieces' sums.
  const std::vector<PieceCost> pieces = *piece_costs(big_vocab(7));
  Result<std::vector<StagePart>> parts = partition_stages(pieces, 4, {1, 2, 3, 1});
  ASSERT_TRUE(parts) << parts.status().message();
  const int first[] = {0, 1, 3, 6}, end[] = {1, 3, 6, 7};
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ((*parts)[s].first_block, first[s]) << s;
    EXPECT_EQ((*parts)[s].end_block, end[s]) << s;
  }
  EXPECT_TRUE((*parts)[0].embedding);
  EXPECT_TRUE((*parts)[3].head);
  EXPECT_DOUBLE_EQ((*parts)[0].flops, pieces[0].flops + pieces[1].flops);
  EXPECT_DOUBLE_EQ((*parts)[3].flops, pieces[7].flops + pieces[8].flops);
  // Counts that do not cover the blocks, or list another number of stages, are refused.
  for (const std::vector<int>& bad : {std::vector<int>{2, 2, 2}, std::vector<int>{1, 2, 3, 2},
                                      std::vector<int>{0, 3, 3, 1}}) {
    Result<std::vector<StagePart>> r = partition_stages(pieces, 4, bad);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.status().message(), "partrain: stage_layers must give 4 counts of at least 1 that sum to the 7 layers");
  }
}

TEST(Partition, TooFewBlocksIsRefused) {
  Result<std::vector<StagePart>> parts = partition_stages(*piece_costs(big_vocab(4)), 5);
  ASSERT_FALSE(parts);
  EXPECT_EQ(parts.status().message(),
            "partrain: 4 transformer blocks cannot fill 5 pipeline stages (each needs at least "
            "one); lower pp or the virtual stages, or add layers");
  engine::ModelOptions unresolved = big_vocab(4);
  unresolved.ffn_hidden = 0;
  EXPECT_FALSE(piece_costs(unresolved));
}

}  // namespace
}  // namespace partrain::pipeline
