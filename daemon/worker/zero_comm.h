// What a ZeRO-sharded model part asks of the data plugins (engine/model/sharding.h
// ShardComm): stage 2/3 models reduce gradient segments into their shard and gather
// parameter segments as they compute; the hooks reduce stage 1's gradients and gather
// stage 1/2's updated parameters through the same object. The engine cannot take an error
// mid-backward, so the first error is kept, every later call is skipped, and status()
// reports it at the next step boundary.
//
// One per model part (the whole model, or each pipeline stage a rank holds). Each data
// plugin instance sees one view (engine/model/shard_views.h) of the parts one after the
// other and owns one shard [B, E) of it: the dense view's plugin over dp, and under expert
// parallelism the experts' view's own instance over the expert-data-parallel group. A flat
// range the model names is cut into its view runs, and each piece goes to its view's plugin
// as view offsets (the part's view offset + the run's).
//
// The part's shard buffer holds its dense ranges, then its expert ranges; the plugin of view
// v indexes it from B (base(): the buffer shifted so that element B of the view would be at
// the base; the plugin touches only the part's own elements).
//
// Expert gradients: each rank's holds every ep rank's tokens (its micro-batches scaled 1/m),
// so the one-rank gradient is their sum over expert-dp divided by dp. The plugin averages
// over expert-dp (dp / ep ranks), so each piece is scaled by 1/ep first (exact for ep a
// power of two): (1/ep) x sum / (dp/ep) = sum / dp. Under tp the routers and experts
// (ParamSpec::tp_summed: each tp rank routed its own tokens) are summed over tp first.
//
// GPU ranks (staged): the plugin cannot add on the device, so it writes each reduced range
// into a staging shard (PARTRAIN_HOST_SHARD_STAGED) and this object adds it into the shard
// with the backend once the plugin released the range (release_grads) or finished the step
// (finish_grads); the in-place gather after the step sends from a device copy of the shard.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "common/status.h"
#include "engine/model/model.h"
#include "engine/model/shard_views.h"
#include "worker/data_plugin_comm.h"

namespace partrain::worker {

class ZeroComm final : public engine::model::ShardComm {
 public:
  // `plugins[v]`: view v's plugin (experts: null without ep), `dp_host` the dp group's host
  // channel; both must outlive this object. `views` are the part's views and `view_offset` where it starts in
  // each plugin's view; `ep` the expert-parallel degree.
  ZeroComm(std::array<DataPluginComm*, engine::model::kNumViews> plugins, comm::Communicator* dp_host,
           const engine::model::PartViews& views, std::array<int64_t, engine::model::kNumViews> view_offset,
           int ep, engine::Backend* backend, bool staged);
  ~ZeroComm() override;
  // Under tp: the part's table (its tp_summed tensors) and the tp group's collectives, which
  // must outlive this object.
  void sum_over_tp(const engine::model::ParamTable& table, engine::model::TensorComm* tp);

  void reduce_grads(const engine::Tensor& data, int64_t offset, const engine::Tensor& shard) override;
  void release_grads(int64_t offset, int64_t count) override;
  void gather_params(const engine::Tensor& shard, const engine::Tensor& dst, int64_t offset) override;
  void wait_params(const engine::Tensor& dst) override;
  double sum(double x) override;  // over the dp group's host channel
  // Stage 1/2: flat range [offset, offset + count) of `flat` (the part's parameters, which
  // hold this rank's shard in place, as `runs`) gathered from every rank's shard, then waited
  // for.
  Status gather_in_place(const engine::Tensor& flat, int64_t offset, int64_t count,
                         const std::vector<engine::model::ShardOptions::Run>& runs);
  // The data plugins' grads_done returned: every staged result is added into the shard.
  Status finish_grads();
  const Status& status() const { return status_; }

 private:
  using View = engine::model::View;
  DataPluginComm* plugin(View v) const { return plugins_[static_cast<size_t>(v)]; }
  // The shard buffer `shard` as view v's plugin indexes it (from its shard begin).
  float* base(View v, const engine::Tensor& shard) const;
  size_t in_view(const engine::model::ViewRun& piece) const {
    return static_cast<size_t>(view_offset_[static_cast<size_t>(piece.view)] + piece.at);
  }

  // Staged: the results the plugin wrote for a piece, not yet added into the shard.
  struct Staged {
    DataPluginComm* plugin = nullptr;
    size_t in_view = 0, count = 0;  // the piece, in the plugin's view
    engine::Tensor shard;           // the shard buffer it goes into
    int64_t at = 0, n = 0;          // its elements of the shard buffer
  };
  void add_staged(const std::function<bool(const Staged&)>& done);
  // A scratch buffer of n fp32 elements in `t` (kept; grown on demand).
  Status scratch(engine::Tensor* t, int64_t n, engine::MemCategory category);

  std::array<DataPluginComm*, engine::model::kNumViews> plugins_;
  comm::Communicator* dp_host_;
  engine::model::PartViews views_;
  std::array<int64_t, engine::model::kNumViews> view_offset_;
  // Per view: base() = shard buffer + shift_[v].
  std::array<int64_t, engine::model::kNumViews> shift_{};
  float expert_scale_;
  engine::model::TensorComm* tp_ = nullptr;
  std::vector<engine::model::FlatRange> tp_summed_;  // flat ranges of the tp_summed tensors
  // The gathers into each destination: (plugin, piece destination) to wait for.
  std::vector<std::pair<float*, std::vector<std::pair<DataPluginComm*, float*>>>> gathers_;
  engine::Backend* be_;
  bool staged_;
  engine::Tensor staging_;     // staged: the gradient shard's staging area
  engine::Tensor shard_copy_;  // staged: the parameter shard sent by gather_in_place
  std::vector<Staged> pending_;
  Status status_;
};

}  // namespace partrain::worker
