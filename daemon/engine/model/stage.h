// Pipeline stages inside the engine: a Model built for one stage holds only its
// contiguous blocks [first_block, end_block), plus the embeddings when it is the first
// stage (first_block == 0) and the final norm and LM head when it is the last
// (end_block == layers). Its parameter table keeps the single-rank table's names, and
// init_params draws each element from (seed, name, index), so a stage's weights are
// exactly the single-rank model's. Dropout keys use the global block index (and the
// embeddings' site `layers`), so a split run draws the masks one rank draws.
//
// GPT-2's tied head: a last stage that is not also the first holds its own copy of
// wte.weight (after the final norm in its table); the executor sums the two copies'
// gradients (Megatron's embedding group) so they stay equal.
//
// Slots: a stage keeps the activations of up to `slots` micro-batches at once (as many as
// the schedule has in flight on the rank), allocated once; forward(batch, slot) and
// backward(slot, ...) pick one. Every other buffer (backward scratch, recompute's shared
// buffers) is shared by the slots.
#pragma once

#include <string>

#include "engine/backend.h"
#include "engine/model/params.h"
#include "engine/model/tensor_parallel.h"
#include "engine/options.h"

namespace partrain::engine::model {

struct StageOptions {
  int first_block = 0;  // blocks [first_block, end_block). Default: 0
  int end_block = -1;   // -1: every block (the whole model). Default: -1
  int slots = 1;        // micro-batches whose activations are kept at once. Default: 1
  // ZB-H1: backward runs as backward-input then backward-weight; each slot also keeps its
  // GEMMs' output gradients between the two. Default: false
  bool split_backward = false;
};

// Which part of a backward to run (ZB-H1 splits it: the input gradient first, the weight
// gradients of the same micro-batch later).
enum class BackwardPart { kAll, kInput, kWeight };

// A weight gradient that backward-input left for backward-weight (ZB-H1): dW += dout^T inp
// (and db += sum dout) of the GEMM with parameters w, b (indices; b < 0: none), from the
// output gradient kept in the slot and the GEMM's input among its activations.
struct DeferredGrad {
  int w = -1, b = -1;
  Shape wshape, bshape;
  Tensor dout, inp;
  int N = 0, C = 0, OC = 0;
};

// The block a table name belongs to ("h.3.ln_1.weight" -> 3), or -1 (embeddings, norm,
// head).
int block_of(const std::string& name);

// The table of stage `stage` of the model `o`: the single-rank table's tensors the stage
// holds, in the same order (embeddings, blocks, final norm, head), and a tied wte last
// on a last stage without the embeddings. end_block -1 gives build_param_table(o, tp, ep).
ParamTable build_stage_table(const ModelOptions& o, const TensorOptions& tp, const ExpertOptions& ep,
                             const StageOptions& stage);

}  // namespace partrain::engine::model
