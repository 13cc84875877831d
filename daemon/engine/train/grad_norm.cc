// See grad_norm.h.
#include "engine/train/grad_norm.h"

#include <algorithm>

namespace partrain::engine::train {

GradSquares local_grad_squares(model::Model& model) {
  Backend& be = model.backend();
  const Tensor grads = model.shard_grads();
  const bool split_experts = model.expert().size > 1;
  const bool tp = model.tensor().size > 1;
  const int tied = model.holds_tied_head_copy() ? model.table().find(model.tied_embedding_name()) : -1;
  GradSquares out;
  if (!split_experts && !tp && tied < 0) {  // every element of the shard counts here
    for (const model::ShardOptions::Run& r : model.shard_runs()) {
      out.dense += be.sum_squares(grads.slice(r.at, {r.end - r.begin}));
    }
    return out;
  }
  const auto& specs = model.table().specs();
  for (const model::ShardOptions::Run& r : model.shard_runs()) {
    for (size_t i = 0; i < specs.size(); ++i) {
      const model::ParamSpec& v = specs[i];
      if (static_cast<int>(i) == tied) continue;
      if (tp && !v.split() && model.tensor().rank != 0) continue;
      const int64_t lo = std::max(r.begin, v.offset), hi = std::min(r.end, v.offset + v.numel());
      if (lo >= hi) continue;
      const double sq = be.sum_squares(grads.slice(r.at + (lo - r.begin), {hi - lo}));
      (split_experts && v.expert ? out.experts : out.dense) += sq;
    }
  }
  return out;
}

}  // namespace partrain::engine::train
