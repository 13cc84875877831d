// The tensor plugin as the worker drives it: the engine's TensorComm
// (engine/model/tensor_parallel.h) on the plugin's C table (include/partrain/tensor.h) and
// this rank's tp communicator. The engine cannot take an error mid-forward, so the first
// failure is kept, every later collective is skipped, and status() reports it at the next
// step boundary.
#pragma once

#include <string>

#include "comm/communicator.h"
#include "common/status.h"
#include "engine/model/tensor_parallel.h"
#include "partrain/tensor.h"

namespace partrain::worker {

class TensorPluginComm final : public engine::model::TensorComm {
 public:
  // `api`, `tp` and its host channel `tp_host` must outlive this object.
  TensorPluginComm(const partrain_tensor_v1_t* api, comm::Communicator* tp, comm::Communicator* tp_host)
      : api_(api), tp_(tp), tp_host_(tp_host) {}
  ~TensorPluginComm() override;  // finalizes the instance
  TensorPluginComm(const TensorPluginComm&) = delete;
  TensorPluginComm& operator=(const TensorPluginComm&) = delete;

  Status init(const std::string& config_toml, bool sp, int global_rank, int world);

  void all_reduce_sum(const engine::Tensor& t) override;
  void all_reduce_max(const engine::Tensor& t) override;
  void all_gather(const engine::Tensor& full, const engine::Tensor& shard) override;
  void reduce_scatter(const engine::Tensor& shard, const engine::Tensor& full) override;
  double sum(double x) override;  // over the tp group's host channel

  // The first error, or OK.
  const Status& status() const { return status_; }
  // The step's collectives (the plugin's step_end).
  Status step_end(partrain_tensor_stats_v1_t* stats);

 private:
  void keep(int rc, const char* what);

  const partrain_tensor_v1_t* api_;
  comm::Communicator* tp_;
  comm::Communicator* tp_host_;
  partrain_comm_v2_t comm_{};
  void* state_ = nullptr;
  Status status_;
  char err_[1024] = {0};
};

}  // namespace partrain::worker
