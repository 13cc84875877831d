// See zero_comm.h.
#include "worker/zero_comm.h"

#include <algorithm>

#include "worker/group_sums.h"

namespace partrain::worker {

namespace model = partrain::engine::model;

ZeroComm::ZeroComm(std::array<DataPluginComm*, model::kNumViews> plugins, comm::Communicator* dp_host,
                   const model::PartViews& views, std::array<int64_t, model::kNumViews> view_offset, int ep)
    : plugins_(plugins), dp_host_(dp_host), views_(views), view_offset_(view_offset),
      expert_scale_(1.0f / static_cast<float>(std::max(1, ep))) {
  // The part's piece of each view's shard, and where it starts in the shard buffer (the
  // dense view's ranges first).
  int64_t pos = 0;
  for (int v = 0; v < model::kNumViews; ++v) {
    const size_t i = static_cast<size_t>(v);
    if (plugins_[i] == nullptr) continue;
    const int64_t B = static_cast<int64_t>(plugins_[i]->plan().shard_begin);
    const int64_t E = static_cast<int64_t>(plugins_[i]->plan().shard_end);
    const int64_t lo = std::max(B, view_offset_[i]);
    const int64_t hi = std::min(E, view_offset_[i] + views_.size(static_cast<model::View>(v)));
    shift_[i] = pos - lo + B;
    pos += std::max<int64_t>(0, hi - lo);
  }
}

void ZeroComm::sum_over_tp(const model::ParamTable& table, model::TensorComm* tp) {
  tp_ = tp;
  tp_summed_.clear();
  for (const model::ParamSpec& p : table.specs()) {
    if (!p.tp_summed) continue;
    if (!tp_summed_.empty() && tp_summed_.back().end == p.offset) {
      tp_summed_.back().end += p.numel();
    } else {
      tp_summed_.push_back({p.offset, p.offset + p.numel()});
    }
  }
}

float* ZeroComm::base(View v, const engine::Tensor& shard) const {
  return shard.ptr<float>() + shift_[static_cast<size_t>(v)];
}

void ZeroComm::reduce_grads(const engine::Tensor& data, int64_t offset, const engine::Tensor& shard) {
  for (const model::FlatRange& r : tp_summed_) {  // each tp rank's share of its own tokens
    const int64_t lo = std::max(offset, r.begin), hi = std::min(offset + data.numel(), r.end);
    if (lo < hi && status_) tp_->all_reduce_sum(data.slice(lo - offset, engine::Shape{hi - lo}));
  }
  for (const model::ViewRun& p : views_.pieces(offset, offset + data.numel())) {
    if (!status_) return;
    float* at = data.ptr<float>() + (p.flat - offset);
    if (p.view == View::kExperts) {  // the plugin's average over expert-dp becomes the sum / dp
      for (int64_t i = 0; i < p.count; ++i) at[i] *= expert_scale_;
    }
    status_ = plugin(p.view)->grads_ready(at, in_view(p), static_cast<size_t>(p.count), base(p.view, shard));
  }
}

void ZeroComm::release_grads(int64_t offset, int64_t count) {
  for (const model::ViewRun& p : views_.pieces(offset, offset + count)) {
    if (!status_) return;
    status_ = plugin(p.view)->grads_release(in_view(p), static_cast<size_t>(p.count));
  }
}

void ZeroComm::gather_params(const engine::Tensor& shard, const engine::Tensor& dst, int64_t offset) {
  std::vector<std::pair<DataPluginComm*, float*>> started;
  for (const model::ViewRun& p : views_.pieces(offset, offset + dst.numel())) {
    if (!status_) break;
    float* to = dst.ptr<float>() + (p.flat - offset);
    status_ = plugin(p.view)->params_gather(base(p.view, shard), to, in_view(p), static_cast<size_t>(p.count));
    if (status_) started.emplace_back(plugin(p.view), to);
  }
  if (!started.empty()) gathers_.emplace_back(dst.ptr<float>(), std::move(started));
}

void ZeroComm::wait_params(const engine::Tensor& dst) {
  auto it = std::find_if(gathers_.begin(), gathers_.end(), [&](const auto& g) { return g.first == dst.ptr<float>(); });
  if (it == gathers_.end()) return;  // nothing was started into it (an empty segment)
  const std::vector<std::pair<DataPluginComm*, float*>> pieces = std::move(it->second);
  gathers_.erase(it);
  for (const auto& [plugin, to] : pieces) {
    if (status_) status_ = plugin->params_wait(to);
  }
}

Status ZeroComm::gather_in_place(const engine::Tensor& flat, int64_t offset, int64_t count) {
  std::vector<std::pair<DataPluginComm*, float*>> started;
  for (const model::ViewRun& p : views_.pieces(offset, offset + count)) {
    if (!status_) break;
    // The plugin reads its own part from base + (x - B), here the flat buffer itself.
    float* to = flat.ptr<float>() + p.flat;
    const size_t i = static_cast<size_t>(p.view);
    float* at = to - static_cast<int64_t>(in_view(p)) + static_cast<int64_t>(plugins_[i]->plan().shard_begin);
    status_ = plugin(p.view)->params_gather(at, to, in_view(p), static_cast<size_t>(p.count));
    if (status_) started.emplace_back(plugin(p.view), to);
  }
  for (const auto& [plugin, to] : started) {
    if (status_) status_ = plugin->params_wait(to);
  }
  return status_;
}

double ZeroComm::sum(double x) {
  if (!status_) return x;
  Result<double> s = sum_over(*dp_host_, x);
  if (!s) {
    status_ = s.status();
    return x;
  }
  return *s;
}

}  // namespace partrain::worker
