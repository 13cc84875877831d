// The parallel layout: which rank holds which shard, and who talks to whom.
//
// Ranks are numbered by an order string, fastest-varying first, as in Megatron-core:
//
//     tp - cp - ep - edp - pp        (ep and edp together make dp: dp = ep + EP * edp)
//
//     rank = tp + TP * (cp + CP * (dp + DP * pp))
//          = tp + TP * (cp + CP * (ep + EP * (edp + (DP / EP) * pp)))
//
// A group along an axis is the set of ranks whose coordinates agree on every other
// dimension of the order string; its members are listed with the varying dimension(s)
// counted up, the fastest first. So a rank's groups are pure arithmetic: no table, no
// communication, the same answer on every node.
//
// Worked example: 64 GPUs, --partrain=tp4,pp2, so DP = 64 / (4 * 2) = 8 and
//     rank = tp + 4 * dp + 32 * pp
//   rank 13 -> tp = 13 % 4 = 1, dp = (13 / 4) % 8 = 3, pp = 13 / 32 = 0
//   TP group of 13: ranks 12 13 14 15          (consecutive: one node, one NVLink domain)
//   DP group of 13: ranks 1 5 9 13 17 21 25 29 (same tp and pp, stride TP = 4)
//   PP group of 13: ranks 13 45                (stride TP * DP = 32: pp is outermost)
// With ep2 as well, EP divides DP: rank 13 has ep = 3 % 2 = 1, edp = 3 / 2 = 1;
//   EP group: ranks 9 13 (same tp, pp and dp-block edp = 1);
//   expert-data-parallel group: ranks 5 13 21 29 (same expert shard ep = 1, every edp).
//
// Part of the layout core: standard library only.
#pragma once

#include <array>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "layout/spec.h"

namespace partrain {

// The communication axes. kDp spans ep and edp; kModel is tp x pp (the ranks that hold
// one full copy of the model together).
enum class Axis { kTp, kCp, kEp, kDp, kExpertDp, kPp, kModel };
inline constexpr std::array<Axis, 7> kAllAxes = {Axis::kTp, Axis::kCp,       Axis::kEp,
                                                 Axis::kDp, Axis::kExpertDp, Axis::kPp,
                                                 Axis::kModel};

// "tp", "cp", "ep", "dp", "expert_dp", "pp", "model".
std::string_view axis_name(Axis axis);

// A rank's coordinate on every axis.
struct RankCoord {
  int tp = 0;
  int cp = 0;
  int ep = 0;         // = dp % EP: which expert shard
  int dp = 0;
  int expert_dp = 0;  // = dp / EP: which dp-block
  int pp = 0;
  bool operator==(const RankCoord&) const = default;
};

class Layout {
 public:
  // Derives dp = world / (tp * cp * pp) when the spec has none. Errors, each naming the
  // fix: world not a multiple of tp*cp*pp, an explicit dp that does not multiply out to
  // the world size, ep not dividing dp.
  static Result<Layout> create(int world, const ParallelSpec& spec);

  int world() const { return world_; }
  int tp() const { return size_[kDimTp]; }
  int cp() const { return size_[kDimCp]; }
  int ep() const { return size_[kDimEp]; }
  int dp() const { return size_[kDimEp] * size_[kDimEdp]; }
  int expert_dp() const { return size_[kDimEdp]; }
  int pp() const { return size_[kDimPp]; }
  // The spec with dp filled in.
  const ParallelSpec& spec() const { return spec_; }

  RankCoord coord(int rank) const;
  // The rank at (tp, cp, dp, pp); ep and expert_dp are taken from dp.
  int rank_of(const RankCoord& c) const;

  // Size of every group along `axis`.
  int group_size(Axis axis) const;
  // The members of `rank`'s group along `axis`, in ring order (the varying coordinates
  // counted up, fastest first); `rank` is one of them.
  std::vector<int> group(Axis axis, int rank) const;
  // Every group along `axis`, ordered by their first member. Each rank is in exactly one.
  std::vector<std::vector<int>> groups(Axis axis) const;

 private:
  // The order string's dimensions, fastest first.
  enum Dim { kDimTp = 0, kDimCp, kDimEp, kDimEdp, kDimPp, kNumDims };
  using Mask = std::array<bool, kNumDims>;
  static Mask mask_of(Axis axis);

  Layout(int world, const ParallelSpec& spec, std::array<int, kNumDims> size);
  std::array<int, kNumDims> split(int rank) const;

  int world_ = 0;
  ParallelSpec spec_;
  std::array<int, kNumDims> size_{};
  std::array<int, kNumDims> stride_{};
};

}  // namespace partrain
