// See shard_views.h.
#include "engine/model/shard_views.h"

#include <algorithm>

namespace partrain::engine::model {

PartViews::PartViews(const ParamTable& table, bool split_experts) : split_(split_experts) {
  for (const ParamSpec& p : table.specs()) {
    const View v = split_experts && p.expert ? View::kExperts : View::kDense;
    int64_t& at = size_[static_cast<size_t>(v)];
    if (!runs_.empty() && runs_.back().view == v) {
      runs_.back().count += p.numel();
    } else {
      runs_.push_back({v, p.offset, at, p.numel()});
    }
    at += p.numel();
  }
}

View PartViews::view_of(const ParamSpec& spec) const {
  return split_ && spec.expert ? View::kExperts : View::kDense;
}

int64_t PartViews::view_offset(const ParamSpec& spec) const {
  for (const ViewRun& r : runs_) {
    if (spec.offset >= r.flat && spec.offset < r.flat + r.count) return r.at + (spec.offset - r.flat);
  }
  return 0;  // an empty tensor past the end
}

std::vector<ViewRun> PartViews::pieces(int64_t begin, int64_t end) const {
  std::vector<ViewRun> out;
  for (const ViewRun& r : runs_) {
    const int64_t lo = std::max(begin, r.flat), hi = std::min(end, r.flat + r.count);
    if (lo < hi) out.push_back({r.view, lo, r.at + (lo - r.flat), hi - lo});
  }
  return out;
}

std::vector<FlatRange> PartViews::flat_ranges(View v, int64_t begin, int64_t end) const {
  std::vector<FlatRange> out;
  for (const ViewRun& r : runs_) {  // a view's runs come in view order
    if (r.view != v) continue;
    const int64_t lo = std::max(begin, r.at), hi = std::min(end, r.at + r.count);
    if (lo >= hi) continue;
    const FlatRange f{r.flat + (lo - r.at), r.flat + (hi - r.at)};
    if (!out.empty() && out.back().end == f.begin) {
      out.back().end = f.end;
    } else {
      out.push_back(f);
    }
  }
  return out;
}

}  // namespace partrain::engine::model
