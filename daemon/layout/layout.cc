// Rank coordinates and groups from the order string tp-cp-ep-edp-pp (see layout.h).
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
                           std::to_string(model) + " ranks or smaller tp/pp");
  }
  const int dp = static_cast<int>(world / model);
  if (spec.dp && *spec.dp != dp) {
    return Status::invalid("partrain: " + degrees_text(spec) + " x dp" +
                           std::to_string(*spec.dp) + " = " +
                           std::to_string(model * *spec.dp) + " ranks, but the job has " +
                           std::to_string(world) + "; drop dp" + std::to_string(*spec.dp) +
                           " to derive dp" + std::to_string(dp) + " from the world size");
  }
  if (dp % spec.ep != 0) {
    return Status::invalid("partrain: ep" + std::to_string(spec.ep) + " does not divide dp" +
                           std::to_string(dp) +
                           " (experts are sharded inside each data-parallel group); use an ep "
                           "that divides " + std::to_string(dp));
  }
  ParallelSpec filled = spec;
  filled.dp = dp;
  return Layout(world, filled, {spec.tp, spec.cp, spec.ep, dp / spec.ep, spec.pp});
}

Layout::Layout(int world, const ParallelSpec& spec, std::array<int, kNumDims> size)
    : world_(world), spec_(spec), size_(size) {
  int stride = 1;
  for (int d = 0; d < kNumDims; ++d) {
    stride_[d] = stride;
    stride *= size_[d];
  }
}

std::array<int, Layout::kNumDims> Layout::split(int rank) const {
  std::array<int, kNumDims> c{};
  for (int d = 0; d < kNumDims; ++d) c[d] = (rank / stride_[d]) % size_[d];
  return c;
}

RankCoord Layout::coord(int rank) const {
  std::array<int, kNumDims> c = split(rank);
  RankCoord out;
  out.tp = c[kDimTp];
  out.cp = c[kDimCp];
  out.ep = c[kDimEp];
  out.expert_dp = c[kDimEdp];
  out.dp = c[kDimEp] + size_[kDimEp] * c[kDimEdp];
  out.pp = c[kDimPp];
  return out;
}

int Layout::rank_of(const RankCoord& c) const {
  return c.tp + tp() * (c.cp + cp() * (c.dp + dp() * c.pp));
}

Layout::Mask Layout::mask_of(Axis axis) {
  Mask m{};
  switch (axis) {
    case Axis::kTp: m[kDimTp] = true; break;
    case Axis::kCp: m[kDimCp] = true; break;
    case Axis::kEp: m[kDimEp] = true; break;
    case Axis::kDp: m[kDimEp] = m[kDimEdp] = true; break;
    case Axis::kExpertDp: m[kDimEdp] = true; break;
    case Axis::kPp: m[kDimPp] = true; break;
    case Axis::kModel: m[kDimTp] = m[kDimPp] = true; break;
  }
  return m;
}

int Layout::group_size(Axis axis) const {
  Mask m = mask_of(axis);
  int n = 1;
  for (int d = 0; d < kNumDims; ++d) {
    if (m[d]) n *= size_[d];
  }
  return n;
}

std::vector<int> Layout::group(Axis axis, int rank) const {
  Mask m = mask_of(axis);
  // The group's first member: rank with every varying coordinate set to 0.
  std::array<int, kNumDims> c = split(rank);
  int base = rank;
  for (int d = 0; d < kNumDims; ++d) {
    if (m[d]) base -= c[d] * stride_[d];
  }
  // Count the varying coordinates up like an odometer, fastest dimension first.
  std::vector<int> members;
  members.reserve(group_size(axis));
  std::array<int, kNumDims> digit{};
  while (true) {
    int r = base;
    for (int d = 0; d < kNumDims; ++d) r += digit[d] * stride_[d];
    members.push_back(r);
    int d = 0;
    for (; d < kNumDims; ++d) {
      if (!m[d]) continue;
      if (++digit[d] < size_[d]) break;
      digit[d] = 0;
    }
    if (d == kNumDims) break;
  }
  return members;
}

std::vector<std::vector<int>> Layout::groups(Axis axis) const {
  Mask m = mask_of(axis);
  std::vector<std::vector<int>> out;
  for (int rank = 0; rank < world_; ++rank) {
    std::array<int, kNumDims> c = split(rank);
    bool is_first = true;
    for (int d = 0; d < kNumDims; ++d) is_first = is_first && (!m[d] || c[d] == 0);
    if (is_first) out.push_back(group(axis, rank));
  }
  return out;
}

}  // namespace partrain
