// See tensor_plugin_comm.h.
#include "worker/tensor_plugin_comm.h"

#include <fmt/format.h>

#include "worker/comm_adapter.h"
#include "worker/group_sums.h"

namespace partrain::worker {

TensorPluginComm::~TensorPluginComm() {
  if (state_ != nullptr) api_->finalize(state_);
}

Status TensorPluginComm::init(const std::string& config_toml, bool sp, int global_rank, int world) {
  comm_ = make_plugin_comm_v2(tp_);
  partrain_tensor_init_args_v1_t args{sizeof(partrain_tensor_init_args_v1_t), config_toml.c_str(),
                                      &comm_, sp ? 1 : 0, global_rank, world};
  const int rc = api_->init(&args, &state_, err_, sizeof err_);
  if (rc == PARTRAIN_OK) return Status::ok();
  err_[sizeof err_ - 1] = '\0';
  const std::string msg = fmt::format("tensor plugin {}: init: {}", api_->name, err_);
  // Only a peer or device the plugin lost (EUNAVAIL) is worth a restart; its own bug is not.
  return rc == PARTRAIN_EINVAL    ? Status::invalid(msg)
         : rc == PARTRAIN_EUNAVAIL ? Status::unavailable(msg)
                                   : Status::internal(msg);
}

void TensorPluginComm::keep(int rc, const char* what) {
  if (rc == PARTRAIN_OK) return;
  err_[sizeof err_ - 1] = '\0';
  const std::string msg = fmt::format("tensor plugin {}: {}: {}", api_->name, what, err_);
  status_ = rc == PARTRAIN_EUNAVAIL ? Status::unavailable(msg)
            : rc == PARTRAIN_EINVAL ? Status::invalid(msg)
                                    : Status::internal(msg);
}

void TensorPluginComm::all_reduce_sum(const engine::Tensor& t) {
  if (!status_) return;
  keep(api_->reduce(state_, t.ptr<float>(), static_cast<size_t>(t.numel()), PARTRAIN_REDUCE_SUM,
                    err_, sizeof err_), "reduce");
}

void TensorPluginComm::all_reduce_max(const engine::Tensor& t) {
  if (!status_) return;
  keep(api_->reduce(state_, t.ptr<float>(), static_cast<size_t>(t.numel()), PARTRAIN_REDUCE_MAX,
                    err_, sizeof err_), "reduce");
}

void TensorPluginComm::all_gather(const engine::Tensor& full, const engine::Tensor& shard) {
  if (!status_) return;
  keep(api_->gather(state_, shard.ptr<float>(), full.ptr<float>(),
                    static_cast<size_t>(shard.numel()), err_, sizeof err_), "gather");
}

void TensorPluginComm::reduce_scatter(const engine::Tensor& shard, const engine::Tensor& full) {
  if (!status_) return;
  keep(api_->scatter(state_, full.ptr<float>(), shard.ptr<float>(),
                     static_cast<size_t>(shard.numel()), err_, sizeof err_), "scatter");
}

double TensorPluginComm::sum(double x) {
  if (!status_) return x;
  Result<double> s = sum_over(*tp_host_, x);
  if (!s) {
    status_ = s.status();
    return x;
  }
  return *s;
}

Status TensorPluginComm::step_end(partrain_tensor_stats_v1_t* stats) {
  PARTRAIN_RETURN_IF_ERROR(status_);
  *stats = {};
  if (api_->step_end == nullptr) return Status::ok();
  keep(api_->step_end(state_, stats, err_, sizeof err_), "step_end");
  return status_;
}

}  // namespace partrain::worker
