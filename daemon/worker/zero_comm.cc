// See zero_comm.h.
#include "worker/zero_comm.h"

#include <algorithm>

#include "worker/group_sums.h"

namespace partrain::worker {

namespace model = partrain::engine::model;

ZeroComm::ZeroComm(std::array<DataPluginComm*, model::kNumViews> plugins, comm::Communicator* dp_host,
                   const model::PartViews& views, std::array<int64_t, model::kNumViews> view_offset, int ep,
                   engine::Backend* backend, bool staged)
    : plugins_(plugins), dp_host_(dp_host), views_(views), view_offset_(view_offset),
      expert_scale_(1.0f / static_cast<float>(std::max(1, ep))), be_(backend), staged_(staged) {
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

ZeroComm::~ZeroComm() {
  be_->release(&staging_);
  be_->release(&shard_copy_);
}

Status ZeroComm::scratch(engine::Tensor* t, int64_t n, engine::MemCategory category) {
  if (t->data != nullptr && t->numel() >= n) return Status::ok();
  be_->release(t);
  Result<engine::Tensor> a = be_->alloc(category, DType::kF32, engine::Shape{std::max<int64_t>(1, n)});
  if (!a) return a.status();
  *t = *a;
  return Status::ok();
}

void ZeroComm::add_staged(const std::function<bool(const Staged&)>& done) {
  std::vector<Staged> left;
  for (const Staged& s : pending_) {
    if (done(s)) {
      be_->accumulate(s.shard.slice(s.at, engine::Shape{s.n}), staging_.slice(s.at, engine::Shape{s.n}));
    } else {
      left.push_back(s);
    }
  }
  pending_ = std::move(left);
}

Status ZeroComm::finish_grads() {
  if (status_) add_staged([](const Staged&) { return true; });
  return status_;
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
  if (staged_ && status_) status_ = scratch(&staging_, shard.numel(), engine::MemCategory::kGrads);
  for (const model::ViewRun& p : views_.pieces(offset, offset + data.numel())) {
    if (!status_) return;
    const engine::Tensor piece = data.slice(p.flat - offset, engine::Shape{p.count});
    if (p.view == View::kExperts) {  // the plugin's average over expert-dp becomes the sum / dp
      be_->scale(piece, expert_scale_);
    }
    DataPluginComm* d = plugin(p.view);
    if (staged_) {  // the plugin writes this rank's part into the staging shard
      const size_t i = static_cast<size_t>(p.view);
      const int64_t B = static_cast<int64_t>(d->plan().shard_begin), E = static_cast<int64_t>(d->plan().shard_end);
      const int64_t a = std::max<int64_t>(B, static_cast<int64_t>(in_view(p)));
      const int64_t b = std::min<int64_t>(E, static_cast<int64_t>(in_view(p)) + p.count);
      if (a < b) pending_.push_back({d, in_view(p), static_cast<size_t>(p.count), shard, shift_[i] + a - B, b - a});
    }
    status_ = d->grads_ready(piece.ptr<float>(), in_view(p), static_cast<size_t>(p.count),
                             base(p.view, staged_ ? staging_ : shard));
  }
}

void ZeroComm::release_grads(int64_t offset, int64_t count) {
  for (const model::ViewRun& p : views_.pieces(offset, offset + count)) {
    if (!status_) return;
    DataPluginComm* d = plugin(p.view);
    const size_t lo = in_view(p), hi = lo + static_cast<size_t>(p.count);
    status_ = d->grads_release(lo, static_cast<size_t>(p.count));
    // The plugin's results for the pieces overlapping the range are in the staging shard.
    if (staged_ && status_) {
      add_staged([&](const Staged& s) { return s.plugin == d && s.in_view < hi && lo < s.in_view + s.count; });
    }
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

Status ZeroComm::gather_in_place(const engine::Tensor& flat, int64_t offset, int64_t count,
                                 const std::vector<engine::model::ShardOptions::Run>& runs) {
  if (staged_ && status_) {  // device buffers: the shard is sent from a copy (the plugin cannot make one)
    int64_t n = 0;
    for (const engine::model::ShardOptions::Run& r : runs) n = std::max(n, r.at + (r.end - r.begin));
    status_ = scratch(&shard_copy_, n, engine::MemCategory::kWorkspace);
    for (const engine::model::ShardOptions::Run& r : runs) {
      if (!status_) break;
      const engine::Shape len{r.end - r.begin};
      be_->copy(shard_copy_.slice(r.at, len), flat.slice(r.begin, len));
    }
  }
  std::vector<std::pair<DataPluginComm*, float*>> started;
  for (const model::ViewRun& p : views_.pieces(offset, offset + count)) {
    if (!status_) break;
    // The plugin reads its own part from base + (x - B): here the flat buffer itself, or the
    // shard's copy laid out as the shard buffer.
    float* to = flat.ptr<float>() + p.flat;
    const size_t i = static_cast<size_t>(p.view);
    float* at = staged_ ? base(p.view, shard_copy_)
                        : to - static_cast<int64_t>(in_view(p)) + static_cast<int64_t>(plugins_[i]->plan().shard_begin);
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
