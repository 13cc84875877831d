// The parallel layout: which rank holds which shard, and who talks to whom.
//
// Ranks are numbered by an order string, fastest-varying first, as in Megatron-core:
//
//     tp - cp - dp - pp                                   (the dense grid)
//     rank = tp + TP * (cp + CP * (dp + DP * pp))
//
// Experts live on a second grid over the same ranks, again as Megatron-core builds it
// (initialize_model_parallel's expert RankGenerator): the cp x dp ranks of one (tp, pp)
// are folded into ep x edp, ep fastest, so ep divides CP * DP (not necessarily DP):
//
//     j  = cp + CP * dp          (the rank's place in its dp x cp group, 0 <= j < CP * DP)
//     ep = j % EP,  edp = j / EP (expert shard, and the ranks holding the same shard)
//     rank = tp + TP * (ep + EP * (edp + EDP * pp)),  EDP = CP * DP / EP
//
// A group along an axis is the set of ranks whose coordinates agree on every other
// dimension of its grid; its members are listed with the varying dimension(s) counted up,
// the fastest first. So a rank's groups are pure arithmetic: no table, no communication,
// the same answer on every node. tests/layout/megatron_groups_test.cc checks every axis
// against Megatron-core's own generator on a grid of layouts.
//
// Worked example: 64 GPUs, --partrain=tp4,pp2, so DP = 64 / (4 * 2) = 8 and
//     rank = tp + 4 * dp + 32 * pp
//   rank 13 -> tp = 13 % 4 = 1, dp = (13 / 4) % 8 = 3, pp = 13 / 32 = 0
//   TP group of 13: ranks 12 13 14 15          (consecutive: one node, one NVLink domain)
//   DP group of 13: ranks 1 5 9 13 17 21 25 29 (same tp and pp, stride TP = 4)
//   PP group of 13: ranks 13 45                (stride TP * DP = 32: pp is outermost)
// With ep2 as well (cp 1, so j = dp): rank 13 has ep = 3 % 2 = 1, edp = 3 / 2 = 1;
//   EP group: ranks 9 13 (same tp, pp and edp = 1);
//   expert-data-parallel group: ranks 5 13 21 29 (same expert shard ep = 1, every edp).
// With cp2 and ep2 on 8 ranks (tp1, dp2): j = cp + 2 dp = rank, so the EP group of rank 1
// is {0, 1} (its cp peer: Megatron puts ep inside the dp x cp block, cp first) and its
// expert-data-parallel group {1, 3}; the dp x cp group, which reduces the dense
// gradients (cp ranks hold the same weights), is {0, 1, 2, 3}.
//
// Part of the layout core: standard library only.
#pragma once

#include <array>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "layout/spec.h"

namespace partrain {

// The communication axes. kModel is tp x pp (the ranks that hold one full copy of the
// model together); kDpCp is dp x cp (the ranks that reduce the dense gradients together:
// cp ranks hold the same weights); kEp and kExpertDp are the expert grid's (above).
enum class Axis { kTp, kCp, kEp, kDp, kExpertDp, kPp, kModel, kDpCp };
inline constexpr std::array<Axis, 8> kAllAxes = {Axis::kTp, Axis::kCp,       Axis::kEp,
                                                 Axis::kDp, Axis::kExpertDp, Axis::kPp,
                                                 Axis::kModel, Axis::kDpCp};

// "tp", "cp", "ep", "dp", "expert_dp", "pp", "model", "dp_cp".
std::string_view axis_name(Axis axis);

// A rank's coordinate on every axis.
struct RankCoord {
  int tp = 0;
  int cp = 0;
  int ep = 0;         // = (cp + CP * dp) % EP: which expert shard
  int dp = 0;
  int expert_dp = 0;  // = (cp + CP * dp) / EP: which block of ep ranks
  int pp = 0;
  int dp_cp = 0;      // = cp + CP * dp: the place in the dp x cp group
  bool operator==(const RankCoord&) const = default;
};

class Layout {
 public:
  // Derives dp = world / (tp * cp * pp) when the spec has none. Errors, each naming the
  // fix: world not a multiple of tp*cp*pp, an explicit dp that does not multiply out to
  // the world size, ep not dividing dp x cp.
  static Result<Layout> create(int world, const ParallelSpec& spec);

  int world() const { return world_; }
  int tp() const { return size_[kDimTp]; }
  int cp() const { return size_[kDimCp]; }
  int ep() const { return ep_; }
  int dp() const { return size_[kDimDp]; }
  int expert_dp() const { return cp() * dp() / ep_; }
  int pp() const { return size_[kDimPp]; }
  // The spec with dp filled in.
  const ParallelSpec& spec() const { return spec_; }

  RankCoord coord(int rank) const;
  // The rank at (tp, cp, dp, pp); ep, expert_dp and dp_cp follow from cp and dp.
  int rank_of(const RankCoord& c) const;

  // Size of every group along `axis`.
  int group_size(Axis axis) const;
  // The members of `rank`'s group along `axis`, in ring order (the varying coordinates
  // counted up, fastest first); `rank` is one of them.
  std::vector<int> group(Axis axis, int rank) const;
  // Every group along `axis`, ordered by their first member. Each rank is in exactly one.
  std::vector<std::vector<int>> groups(Axis axis) const;

 private:
  // The dense grid's dimensions, fastest first.
  enum Dim { kDimTp = 0, kDimCp, kDimDp, kDimPp, kNumDims };
  // One mixed-radix digit of a rank: (rank / stride) % size.
  struct Digit {
    int stride = 1, size = 1;
  };
  // The digits an axis varies, fastest first (from either grid).
  std::vector<Digit> digits_of(Axis axis) const;

  Layout(int world, const ParallelSpec& spec, std::array<int, kNumDims> size);

  int world_ = 0;
  ParallelSpec spec_;
  std::array<int, kNumDims> size_{};
  std::array<int, kNumDims> stride_{};
  int ep_ = 1;
};

}  // namespace partrain
