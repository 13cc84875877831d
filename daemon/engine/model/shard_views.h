// How the data-parallel strategies see a model part's flat buffer, and which flat ranges a
// ZeRO shard of each view is.
//
// A data plugin reduces (and ZeRO shards) a *view*: the concatenation, in table order, of
// the tensors its group reduces. Without expert parallelism there is one view, every tensor
// (view offset = flat offset). With expert parallelism (ep > 1) the replicated tensors and
// the experts are reduced over different groups: the replicated ones over dp, each expert
// over the ranks that hold it (expert-dp). As in Megatron's distributed optimizer, which
// keeps expert parameters in a buffer of their own sharded over the expert-data-parallel
// group, there are then two views, dense and experts, each with its own plugin instance.
// Their tensors interleave in the flat buffer (a MoE block's router, its experts, the next
// block's attention), so one view's shard is a short list of flat ranges; the blocks stay
// contiguous in the flat buffer, which ZeRO-2/3's per-block segments need.
//
// Worked example: a part [wte 10][router 2][experts 8][ln_f 2] (flat 0..21) under ep:
//   dense view   = wte, router, ln_f: view 0..11 is flat 0..11, view 12..13 is flat 20..21;
//   expert view  = flat 12..19 (view 0..7).
// dp rank 1 of dp2 owns dense view [7, 14): flat ranges [7, 12) and [20, 22); expert-dp
// rank 0 of 2 owns expert view [0, 4): flat [12, 16). Its shard buffers hold those three
// ranges one after the other, dense first: [7, 12) at 0, [20, 22) at 5, [12, 16) at 7.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "engine/model/params.h"

namespace partrain::engine::model {

// Elements [begin, end) of a buffer.
struct FlatRange {
  int64_t begin = 0, end = 0;
  int64_t numel() const { return end - begin; }
  bool operator==(const FlatRange&) const = default;
};

enum class View : int { kDense = 0, kExperts = 1 };
inline constexpr int kNumViews = 2;

// A run of one view's tensors that is contiguous in both the view and the flat buffer:
// flat elements [flat, flat + count) are view elements [at, at + count).
struct ViewRun {
  View view = View::kDense;
  int64_t flat = 0, at = 0, count = 0;
};

class PartViews {
 public:
  PartViews() = default;
  // `split_experts` (ep > 1): the experts (ParamSpec::expert) form their own view; else every
  // tensor is in the dense view.
  PartViews(const ParamTable& table, bool split_experts);

  // Every run, in flat order (the runs cover the flat buffer once).
  const std::vector<ViewRun>& runs() const { return runs_; }
  int64_t size(View v) const { return size_[static_cast<size_t>(v)]; }
  bool split_experts() const { return split_; }
  // The view tensor `spec` belongs to, and its first element there.
  View view_of(const ParamSpec& spec) const;
  int64_t view_offset(const ParamSpec& spec) const;
  // The pieces of flat range [begin, end), in flat order, each inside one run.
  std::vector<ViewRun> pieces(int64_t begin, int64_t end) const;
  // The flat ranges of view elements [begin, end) of `v` (this part's view coordinates), in
  // view order, adjacent runs merged.
  std::vector<FlatRange> flat_ranges(View v, int64_t begin, int64_t end) const;

 private:
  std::vector<ViewRun> runs_;
  std::array<int64_t, kNumViews> size_{};
  bool split_ = false;
};

// What the data plugins decided: the ZeRO stage and each view's shard, in the coordinates
// of the plugin's view over every part the rank holds (parts one after the other).
struct ViewShards {
  int stage = 0;     // 0: nothing sharded. Default: 0
  int prefetch = 1;  // stage 3: blocks gathered ahead. Default: 1
  std::array<FlatRange, kNumViews> view{};  // this rank's shard of each view
};

}  // namespace partrain::engine::model
