// What a ZeRO-sharded model asks of the data plugin (engine/model/sharding.h ShardComm):
// stage 2/3 models reduce gradient segments into their shard and gather parameter segments
// as they compute. The engine cannot take an error mid-backward, so the first error is kept,
// every later call is skipped, and status() reports it at the next step boundary.
#pragma once

#include "comm/communicator.h"
#include "common/status.h"
#include "engine/model/sharding.h"
#include "worker/data_plugin_comm.h"

namespace partrain::worker {

class ZeroComm final : public engine::model::ShardComm {
 public:
  // `plugin` and `dp` must outlive this object.
  ZeroComm(DataPluginComm* plugin, comm::Communicator* dp) : plugin_(plugin), dp_(dp) {}

  void reduce_grads(const engine::Tensor& data, int64_t offset, const engine::Tensor& shard) override;
  void release_grads(int64_t offset, int64_t count) override;
  void gather_params(const engine::Tensor& shard, const engine::Tensor& dst, int64_t offset) override;
  void wait_params(const engine::Tensor& dst) override;
  double sum(double x) override;  // over the dp group
  const Status& status() const { return status_; }

 private:
  DataPluginComm* plugin_;
  comm::Communicator* dp_;
  Status status_;
};

}  // namespace partrain::worker
