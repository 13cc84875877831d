// Stage partition: splits the model into `stages` contiguous pieces (pp, or pp*v with
// virtual stages) balanced by estimated cost rather than by layer count. The pieces are
// the token embedding, the L transformer blocks and the LM head; every stage gets at least
// one block, the embedding goes with the first stage and the head with the last.
//
// Cost: forward FLOPs per token (a multiply-add is 2), from engine::ModelOptions with
// C = hidden, T = seq_len, V = vocab, F = ffn_hidden, kv = kv_heads, H = heads:
//   embedding  2C                    (a gather plus the position add; nominal)
//   block      attention 4C^2 + 4C*(C*kv/H) (Q, output; K, V projections)
//              + 4TC (scores and weighted sum over the full context)
//              + MLP 4CF (gpt2) or 6CF (llama, SwiGLU)
//              MoE blocks: router 2CE + top_k times the MLP
//   head       2CV
// Backward costs about twice the forward for every piece, so the forward alone ranks them.
// The split minimises the most expensive stage; among equal splits, earlier stages take
// as many blocks as they can.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "engine/options.h"

namespace partrain::pipeline {

struct PieceCost {
  std::string name;  // "embedding", "block 3", "head"
  double flops = 0;  // forward FLOPs per token
};

// Embedding, blocks 0..L-1, head. `model` must have kv_heads and ffn_hidden resolved
// (engine::resolved); invalid otherwise.
Result<std::vector<PieceCost>> piece_costs(const engine::ModelOptions& model);

struct StagePart {
  int stage = 0;
  int first_block = 0;  // blocks [first_block, end_block)
  int end_block = 0;
  bool embedding = false;
  bool head = false;
  double flops = 0;     // forward FLOPs per token of the whole stage
};

// Splits `pieces` (embedding, blocks..., head, as piece_costs gives) into `stages`: the
// cost-balanced split, or, when `layers_per_stage` is given (the job's [parallelism]
// stage_layers, one count per stage), exactly those block counts in stage order. Invalid
// when there are fewer blocks than stages or the counts do not fit.
Result<std::vector<StagePart>> partition_stages(const std::vector<PieceCost>& pieces, int stages,
                                                const std::vector<int>& layers_per_stage = {});

// One line per stage: "stage 0 (rank 0, chunk 0): embedding + blocks 0-5, 1.23 MFLOP/token
// (26.0%)", then the imbalance (largest stage over the mean).
std::string describe_partition(const std::vector<StagePart>& parts, int pp);

}  // namespace partrain::pipeline
