// What a ZeRO-sharded model part asks of the data plugin (engine/model/sharding.h
// ShardComm): stage 2/3 models reduce gradient segments into their shard and gather
// parameter segments as they compute. The engine cannot take an error mid-backward, so the
// first error is kept, every later call is skipped, and status() reports it at the next step
// boundary.
//
// One per model part (the whole model, or each pipeline stage a rank holds). The plugin sees
// the parts' flat buffers one after the other and owns one shard [B, E) of that view; a part
// starting at view offset o keeps the piece of the shard inside it. Offsets go to the plugin
// as o + local offset, and the part's shard tensor as the base the plugin indexes from B
// (shard_base: the part's piece minus its distance from B; the plugin only touches elements
// of the part's own range, so only the part's memory).
#pragma once

#include <cstdint>

#include "comm/communicator.h"
#include "common/status.h"
#include "engine/model/model.h"
#include "engine/model/sharding.h"
#include "worker/data_plugin_comm.h"

namespace partrain::worker {

class ZeroComm final : public engine::model::ShardComm {
 public:
  // `plugin` and `dp` must outlive this object; `part` is the model part this serves and
  // `view_offset` where its flat buffer starts in the plugin's view.
  ZeroComm(DataPluginComm* plugin, comm::Communicator* dp, const engine::model::Model& part, int64_t view_offset);

  void reduce_grads(const engine::Tensor& data, int64_t offset, const engine::Tensor& shard) override;
  void release_grads(int64_t offset, int64_t count) override;
  void gather_params(const engine::Tensor& shard, const engine::Tensor& dst, int64_t offset) override;
  void wait_params(const engine::Tensor& dst) override;
  double sum(double x) override;  // over the dp group
  const Status& status() const { return status_; }

  // The part's shard tensor (shard_params or shard_grads) as the plugin indexes it.
  float* shard_base(const engine::Tensor& shard) const { return shard.ptr<float>() - shift_; }
  int64_t view_offset() const { return view_offset_; }

 private:
  DataPluginComm* plugin_;
  comm::Communicator* dp_;
  int64_t view_offset_;
  int64_t shift_;  // the part's first shard element in the view, minus the plugin's shard begin
  Status status_;
};

}  // namespace partrain::worker
