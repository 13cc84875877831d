// Rank coordinates and groups from the dense grid tp-cp-dp-pp and the expert grid
// tp-ep-edp-pp (see layout.h).
#include "layout/layout.h"

#include <string>

namespace partrain {
namespace {

std::string degrees_text(const ParallelSpec& s) {
  std::string out = "tp" + std::to_string(s.tp);
  if (s.cp != 1) out += " x cp" + std::to_string(s.cp);
  out += " x pp" + std::to_string(s.pp);
  return out;
}

}  // namespace

std::string_view axis_name(Axis axis) {
  switch (axis) {
    case Axis::kTp: return "tp";
    case Axis::kCp: return "cp";
    case Axis::kEp: return "ep";
    case Axis::kDp: return "dp";
    case Axis::kExpertDp: return "expert_dp";
    case Axis::kPp: return "pp";
    case Axis::kModel: return "model";
    case Axis::kDpCp: return "dp_cp";
  }
  return "?";
}

Result<Layout> Layout::create(int world, const ParallelSpec& spec) {
  if (world < 1) {
    return Status::invalid("partrain: the job has " + std::to_string(world) +
                           " ranks; run at least one task");
  }
  const long long model = 1LL * spec.tp * spec.cp * spec.pp;
  if (world % model != 0) {
    return Status::invalid("partrain: world size " + std::to_string(world) +
                           " is not a multiple of " + degrees_text(spec) + " = " +
                           std::to_string(model) + "; use a multiple of " +
                           std::to_string(model) + " ranks or smaller " +
                           (spec.cp != 1 ? "tp/cp/pp" : "tp/pp"));
  }
  const int dp = static_cast<int>(world / model);
  if (spec.dp && *spec.dp != dp) {
    return Status::invalid("partrain: " + degrees_text(spec) + " x dp" +
                           std::to_string(*spec.dp) + " = " +
                           std::to_string(model * *spec.dp) + " ranks, but the job has " +
                           std::to_string(world) + "; drop dp" + std::to_string(*spec.dp) +
                           " to derive dp" + std::to_string(dp) + " from the world size");
  }
  if ((dp * spec.cp) % spec.ep != 0) {
    if (spec.cp == 1) {
      return Status::invalid("partrain: ep" + std::to_string(spec.ep) + " does not divide dp" +
                             std::to_string(dp) +
                             " (experts are sharded inside each data-parallel group); use an ep "
                             "that divides " + std::to_string(dp));
    }
    return Status::invalid("partrain: ep" + std::to_string(spec.ep) + " does not divide dp" +
                           std::to_string(dp) + " x cp" + std::to_string(spec.cp) + " = " +
                           std::to_string(dp * spec.cp) +
                           " (experts are sharded inside each dp x cp group, as in Megatron-core); "
                           "use an ep that divides " + std::to_string(dp * spec.cp));
  }
  ParallelSpec filled = spec;
  filled.dp = dp;
  Layout l(world, filled, {spec.tp, spec.cp, dp, spec.pp});
  l.ep_ = spec.ep;
  return l;
}

Layout::Layout(int world, const ParallelSpec& spec, std::array<int, kNumDims> size)
    : world_(world), spec_(spec), size_(size) {
  int stride = 1;
  for (int d = 0; d < kNumDims; ++d) {
    stride_[d] = stride;
    stride *= size_[d];
  }
}

RankCoord Layout::coord(int rank) const {
  RankCoord out;
  out.tp = (rank / stride_[kDimTp]) % size_[kDimTp];
  out.cp = (rank / stride_[kDimCp]) % size_[kDimCp];
  out.dp = (rank / stride_[kDimDp]) % size_[kDimDp];
  out.pp = (rank / stride_[kDimPp]) % size_[kDimPp];
  out.dp_cp = out.cp + cp() * out.dp;
  out.ep = out.dp_cp % ep_;
  out.expert_dp = out.dp_cp / ep_;
  return out;
}

int Layout::rank_of(const RankCoord& c) const {
  return c.tp + tp() * (c.cp + cp() * (c.dp + dp() * c.pp));
}

// Each axis as digits of the rank, fastest first: the dense grid's (stride_ of tp, cp, dp,
// pp) and the expert grid's, whose ep digit sits where cp starts (stride TP) and whose
// expert-dp digit follows it (stride TP * EP), both inside the dp x cp block.
std::vector<Layout::Digit> Layout::digits_of(Axis axis) const {
  const Digit tp{stride_[kDimTp], size_[kDimTp]}, cp{stride_[kDimCp], size_[kDimCp]};
  const Digit dp{stride_[kDimDp], size_[kDimDp]}, pp{stride_[kDimPp], size_[kDimPp]};
  switch (axis) {
    case Axis::kTp: return {tp};
    case Axis::kCp: return {cp};
    case Axis::kDp: return {dp};
    case Axis::kPp: return {pp};
    case Axis::kModel: return {tp, pp};
    case Axis::kDpCp: return {cp, dp};
    case Axis::kEp: return {{stride_[kDimCp], ep_}};
    case Axis::kExpertDp: return {{stride_[kDimCp] * ep_, expert_dp()}};
  }
  return {};
}

int Layout::group_size(Axis axis) const {
  int n = 1;
  for (const Digit& d : digits_of(axis)) n *= d.size;
  return n;
}

std::vector<int> Layout::group(Axis axis, int rank) const {
  const std::vector<Digit> digits = digits_of(axis);
  // The group's first member: rank with every varying digit set to 0.
  int base = rank;
  for (const Digit& d : digits) base -= ((rank / d.stride) % d.size) * d.stride;
  // Count the varying digits up like an odometer, fastest first.
  std::vector<int> members;
  members.reserve(static_cast<size_t>(group_size(axis)));
  std::vector<int> digit(digits.size(), 0);
  while (true) {
    int r = base;
    for (size_t i = 0; i < digits.size(); ++i) r += digit[i] * digits[i].stride;
    members.push_back(r);
    size_t i = 0;
    for (; i < digits.size(); ++i) {
      if (++digit[i] < digits[i].size) break;
      digit[i] = 0;
    }
    if (i == digits.size()) break;
  }
  return members;
}

std::vector<std::vector<int>> Layout::groups(Axis axis) const {
  const std::vector<Digit> digits = digits_of(axis);
  std::vector<std::vector<int>> out;
  for (int rank = 0; rank < world_; ++rank) {
    bool is_first = true;
    for (const Digit& d : digits) is_first = is_first && (rank / d.stride) % d.size == 0;
    if (is_first) out.push_back(group(axis, rank));
  }
  return out;
}

}  // namespace partrain
