// See expert_plugin_comm.h.
#include "worker/expert_plugin_comm.h"

#include <fmt/format.h>

#include "worker/comm_adapter.h"
#include "worker/group_sums.h"

namespace partrain::worker {

ExpertPluginComm::~ExpertPluginComm() {
  if (state_ != nullptr) api_->finalize(state_);
}

Status ExpertPluginComm::init(const std::string& config_toml, int num_experts, int global_rank, int world) {
  ep_table_ = make_plugin_comm_v2(ep_);
  all_to_all_ = make_plugin_all_to_all(ep_);
  if (expert_dp_ != nullptr) expert_dp_table_ = make_plugin_comm_v2(expert_dp_);
  partrain_expert_init_args_v1_t args{sizeof(partrain_expert_init_args_v1_t), config_toml.c_str(),
                                      &ep_table_, &all_to_all_,
                                      expert_dp_ != nullptr ? &expert_dp_table_ : nullptr,
                                      num_experts, global_rank, world};
  const int rc = api_->init(&args, &state_, err_, sizeof err_);
  if (rc == PARTRAIN_OK) return Status::ok();
  err_[sizeof err_ - 1] = '\0';
  const std::string msg = fmt::format("expert plugin {}: init: {}", api_->name, err_);
  // Only a peer or device the plugin lost (EUNAVAIL) is worth a restart; its own bug is not.
  return rc == PARTRAIN_EINVAL    ? Status::invalid(msg)
         : rc == PARTRAIN_EUNAVAIL ? Status::unavailable(msg)
                                   : Status::internal(msg);
}

void ExpertPluginComm::keep(int rc, const char* what) {
  if (rc == PARTRAIN_OK) return;
  err_[sizeof err_ - 1] = '\0';
  const std::string msg = fmt::format("expert plugin {}: {}: {}", api_->name, what, err_);
  status_ = rc == PARTRAIN_EUNAVAIL ? Status::unavailable(msg)
            : rc == PARTRAIN_EINVAL ? Status::invalid(msg)
                                    : Status::internal(msg);
}

void ExpertPluginComm::all_to_allv(const float* in, const std::vector<size_t>& send_counts, float* out,
                                   const std::vector<size_t>& recv_counts) {
  if (!status_) return;
  keep(api_->all_to_all(state_, in, send_counts.data(), out, recv_counts.data(), err_, sizeof err_),
       "all_to_all");
}

double ExpertPluginComm::sum(double x) {
  if (!status_) return x;
  Result<double> s = sum_over(*ep_host_, x);
  if (!s) {
    status_ = s.status();
    return x;
  }
  return *s;
}

Status ExpertPluginComm::reduce_expert_grads(float* data, size_t count, float scale) {
  PARTRAIN_RETURN_IF_ERROR(status_);
  keep(api_->reduce_expert_grads(state_, data, count, scale, err_, sizeof err_), "reduce_expert_grads");
  return status_;
}

Status ExpertPluginComm::step_end(partrain_expert_stats_v1_t* stats) {
  PARTRAIN_RETURN_IF_ERROR(status_);
  *stats = {};
  if (api_->step_end == nullptr) return Status::ok();
  keep(api_->step_end(state_, stats, err_, sizeof err_), "step_end");
  return status_;
}

Status reduce_expert_grads(ExpertPluginComm& comm, engine::model::Model& model, float scale) {
  const auto& specs = model.table().specs();
  const engine::Tensor all = model.grads();
  float* grads = all.ptr<float>();
  for (size_t i = 0; i < specs.size();) {
    if (!specs[i].expert) {
      ++i;
      continue;
    }
    const int64_t lo = specs[i].offset;
    while (i < specs.size() && specs[i].expert) ++i;
    const int64_t hi = i < specs.size() ? specs[i].offset : model.num_params();
    // Scaled first, by the backend where the gradients live (the sum stays in range); the
    // plugin, which never touches the buffer, applies no scale of its own.
    model.backend().scale(all.slice(lo, engine::Shape{hi - lo}), scale);
    PARTRAIN_RETURN_IF_ERROR(comm.reduce_expert_grads(grads + lo, static_cast<size_t>(hi - lo), 1.0f));
  }
  return Status::ok();
}

}  // namespace partrain::worker
