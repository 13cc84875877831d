// The data plugin as the worker drives it: one C++ face over the plugin's C table, v2 or
// v1 (include/partrain/data.h). A v1 plugin is driven through its v1 table and can only
// replicate (stage 0); every call's error becomes a Status naming the call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "comm/communicator.h"
#include "common/status.h"
#include "partrain/data.h"

namespace partrain::worker {

class DataPluginComm {
 public:
  // Exactly one of v1, v2 is non-null; the table must outlive this object.
  DataPluginComm(const partrain_strategy_v1_t* v1, const partrain_strategy_v2_t* v2) : v1_(v1), v2_(v2) {}
  ~DataPluginComm();  // finalizes the instance
  DataPluginComm(const DataPluginComm&) = delete;
  DataPluginComm& operator=(const DataPluginComm&) = delete;

  // Creates the instance on the dp communicator `dp` (must outlive this object). The plan
  // (stage, shard) is the plugin's answer; a v1 plugin's is stage 0.
  Status init(const std::string& config_toml, comm::Communicator* dp, int global_rank,
              size_t num_params, uint64_t host_features);
  const partrain_data_plan_v2_t& plan() const { return plan_; }

  Status step_begin(int64_t step);
  // data[0] is element `offset`; `grads` is the whole gradient buffer (v1 needs it) or null.
  Status grads_ready(float* data, size_t offset, size_t count, float* shard_grads);
  Status grads_release(size_t offset, size_t count);
  Status grads_done(float* grads);
  Status params_gather(const float* shard_params, float* dst, size_t offset, size_t count);
  Status params_wait(float* dst);
  Status step_end(partrain_sync_stats_v2_t* stats);

 private:
  Status status_of(int rc, const char* what) const;

  const partrain_strategy_v1_t* v1_;
  const partrain_strategy_v2_t* v2_;
  void* state_ = nullptr;
  partrain_comm_v1_t comm_v1_{};
  partrain_comm_v2_t comm_v2_{};
  partrain_data_plan_v2_t plan_{};
  partrain_sync_stats_v1_t stats_v1_{};  // a v1 plugin's stats of the step (from grads_done)
  mutable char err_[1024] = {0};
  int rank_ = 0;       // the global rank (init)
  int64_t step_ = 0;   // step_begin's: the steps already made, for the fault hook
};

}  // namespace partrain::worker
