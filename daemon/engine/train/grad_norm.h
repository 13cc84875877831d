// This rank's share of the gradient's sum of squares, for global-norm clipping
// (PyTorch's clip_grad_norm_ over the whole model, whatever the layout). Each logical
// element is counted on exactly one rank once the hooks have summed the shares over the
// groups that split the model:
//   - ZeRO: a rank counts its shard's ranges (summed over dp: the dp group covers the
//     replicated tensors once, and under ep each expert once, as its expert-dp shards);
//   - tensor parallel: a split tensor's piece on its rank, a tensor every tp rank holds whole
//     on tp rank 0 only (summed over tp);
//   - expert parallel: each expert on the rank holding it, kept apart in `experts` (summed
//     over ep without ZeRO; under ZeRO the dp sum covers them), the replicated rest once;
//   - pipeline: each stage its own tensors, the tied head's copy of wte left to the first
//     stage (summed over pp).
// Worked example, tp2 on a 2-tensor model (a split [4] weight and a replicated [2] norm):
// rank 0 counts its 2 weight elements and the norm, rank 1 only its 2 weight elements;
// their sum is the one-rank sum of 6 squares.
#pragma once

#include "engine/model/model.h"
#include "engine/train/step_hooks.h"

namespace partrain::engine::train {

GradSquares local_grad_squares(model::Model& model);

}  // namespace partrain::engine::train
