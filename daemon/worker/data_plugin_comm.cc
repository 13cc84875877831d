// See data_plugin_comm.h.
#include "worker/data_plugin_comm.h"

#include <fmt/format.h>

#include "store/fault.h"
#include "worker/comm_adapter.h"

namespace partrain::worker {

DataPluginComm::~DataPluginComm() {
  if (state_ == nullptr) return;
  if (v2_ != nullptr) v2_->finalize(state_);
  if (v1_ != nullptr) v1_->finalize(state_);
}

Status DataPluginComm::status_of(int rc, const char* what) const {
  if (rc == PARTRAIN_OK) return Status::ok();
  err_[sizeof err_ - 1] = '\0';  // a plugin may fill the buffer without its terminator
  const std::string msg = fmt::format("data plugin {}: {}", what, err_);
  if (rc == PARTRAIN_EINVAL) return Status::invalid(msg);
  if (rc == PARTRAIN_EUNAVAIL) return Status::unavailable(msg);
  return Status::internal(msg);
}

Status DataPluginComm::init(const std::string& config_toml, comm::Communicator* dp, int global_rank,
                        size_t num_params, uint64_t host_features) {
  plan_ = partrain_data_plan_v2_t{sizeof(partrain_data_plan_v2_t), 0, 0, num_params, 1};
  rank_ = global_rank;
  if (v1_ != nullptr) {
    comm_v1_ = make_plugin_comm(dp);
    partrain_init_args_v1_t args{sizeof(partrain_init_args_v1_t), config_toml.c_str(), &comm_v1_,
                                 global_rank, 0, num_params};
    return status_of(v1_->init(&args, &state_, err_, sizeof err_), "init");
  }
  comm_v2_ = make_plugin_comm_v2(dp);
  partrain_init_args_v2_t args{sizeof(partrain_init_args_v2_t), config_toml.c_str(), &comm_v2_,
                               global_rank, 0, num_params, host_features};
  PARTRAIN_RETURN_IF_ERROR(status_of(v2_->init(&args, &plan_, &state_, err_, sizeof err_), "init"));
  if (plan_.stage < 0 || plan_.stage > 3 || plan_.shard_begin > plan_.shard_end ||
      plan_.shard_end > num_params || plan_.prefetch < 0) {
    return Status::internal(fmt::format(
        "data plugin init: the plan is not valid (stage {}, shard [{}, {}) of {} elements, "
        "prefetch {}); fix the plugin", plan_.stage, plan_.shard_begin, plan_.shard_end,
        num_params, plan_.prefetch));
  }
  return Status::ok();
}

Status DataPluginComm::step_begin(int64_t step) {
  stats_v1_ = {};
  step_ = step;  // steps already made: 0 during the first
  if (v1_ != nullptr) {
    return v1_->step_begin == nullptr ? Status::ok()
                                      : status_of(v1_->step_begin(state_, step, err_, sizeof err_), "step_begin");
  }
  if (v2_->step_begin == nullptr) return Status::ok();
  return status_of(v2_->step_begin(state_, step, err_, sizeof err_), "step_begin");
}

Status DataPluginComm::grads_ready(float* data, size_t offset, size_t count, float* shard_grads) {
  if (v1_ != nullptr) {
    if (v1_->grads_ready == nullptr) return Status::ok();
    return status_of(v1_->grads_ready(state_, data - offset, offset, count, err_, sizeof err_),
                     "grads_ready");
  }
  if (v2_->grads_ready == nullptr) return Status::ok();
  return status_of(v2_->grads_ready(state_, data, offset, count, shard_grads, err_, sizeof err_),
                   "grads_ready");
}

Status DataPluginComm::grads_release(size_t offset, size_t count) {
  if (v2_ == nullptr || v2_->grads_release == nullptr) return Status::ok();
  return status_of(v2_->grads_release(state_, offset, count, err_, sizeof err_), "grads_release");
}

Status DataPluginComm::grads_done(float* grads) {
  // Tests: PARTRAIN_FAULT=plugin_hang:STEP[:RANK] (store/fault.h), STEP 1-based as logged
  // (the plugin's step_begin counts the steps already made).
  store::hang_point(step_ + 1, rank_);
  if (v1_ != nullptr) {
    if (v1_->grads_done == nullptr) return Status::ok();
    return status_of(v1_->grads_done(state_, grads, &stats_v1_, err_, sizeof err_), "grads_done");
  }
  if (v2_->grads_done == nullptr) return Status::ok();
  return status_of(v2_->grads_done(state_, err_, sizeof err_), "grads_done");
}

Status DataPluginComm::params_gather(const float* shard_params, float* dst, size_t offset, size_t count) {
  if (v2_ == nullptr || v2_->params_gather == nullptr) {
    return Status::internal("data plugin: its plan shards parameters but it has no params_gather");
  }
  return status_of(v2_->params_gather(state_, shard_params, dst, offset, count, err_, sizeof err_),
                   "params_gather");
}

Status DataPluginComm::params_wait(float* dst) {
  if (v2_ == nullptr || v2_->params_wait == nullptr) return Status::ok();
  return status_of(v2_->params_wait(state_, dst, err_, sizeof err_), "params_wait");
}

Status DataPluginComm::step_end(partrain_sync_stats_v2_t* stats) {
  *stats = {};
  if (v1_ != nullptr) {
    *stats = partrain_sync_stats_v2_t{stats_v1_.comm_ms, stats_v1_.exposed_ms, stats_v1_.bytes,
                                      stats_v1_.collectives};
    return Status::ok();
  }
  if (v2_->step_end == nullptr) return Status::ok();
  return status_of(v2_->step_end(state_, stats, err_, sizeof err_), "step_end");
}

}  // namespace partrain::worker
