// The expert plugin as the worker drives it: the engine's ExpertComm
// (engine/model/expert_parallel.h) on the plugin's C table (include/partrain/expert.h), this
// rank's ep communicator (and its all-to-all) and, when dp > ep, the expert-data-parallel
// communicator. As TensorPluginComm: the engine cannot take an error mid-forward, so the
// first failure is kept, every later call is skipped, and status() reports it at the next
// step boundary.
#pragma once

#include <string>

#include "comm/communicator.h"
#include "common/status.h"
#include "engine/model/expert_parallel.h"
#include "engine/model/model.h"
#include "partrain/expert.h"

namespace partrain::worker {

class ExpertPluginComm final : public engine::model::ExpertComm {
 public:
  // `api`, `ep`, its host channel `ep_host` and `expert_dp` (null when dp == ep) must
  // outlive this object.
  ExpertPluginComm(const partrain_expert_v1_t* api, comm::Communicator* ep, comm::Communicator* ep_host,
                   comm::Communicator* expert_dp)
      : api_(api), ep_(ep), ep_host_(ep_host), expert_dp_(expert_dp) {}
  ~ExpertPluginComm() override;  // finalizes the instance
  ExpertPluginComm(const ExpertPluginComm&) = delete;
  ExpertPluginComm& operator=(const ExpertPluginComm&) = delete;

  Status init(const std::string& config_toml, int num_experts, int global_rank, int world);

  void all_to_allv(const float* in, const std::vector<size_t>& send_counts, float* out,
                   const std::vector<size_t>& recv_counts) override;
  double sum(double x) override;  // over the ep group's host channel
  // The experts' gradients data[0..count): summed over the expert-data-parallel group, times
  // scale.
  Status reduce_expert_grads(float* data, size_t count, float scale);

  // The first error, or OK.
  const Status& status() const { return status_; }
  // The step's collectives (the plugin's step_end).
  Status step_end(partrain_expert_stats_v1_t* stats);

 private:
  void keep(int rc, const char* what);

  const partrain_expert_v1_t* api_;
  comm::Communicator* ep_;
  comm::Communicator* ep_host_;
  comm::Communicator* expert_dp_;
  partrain_comm_v2_t ep_table_{}, expert_dp_table_{};
  partrain_alltoall_v1_t all_to_all_{};
  void* state_ = nullptr;
  Status status_;
  char err_[1024] = {0};
};

// The model's expert gradients summed over the expert-data-parallel group, times `scale`
// (1/dp: each already holds every ep rank's micro-batches, each scaled 1/m): one plugin
// call per run of consecutive expert tensors (one per MoE block).
Status reduce_expert_grads(ExpertPluginComm& comm, engine::model::Model& model, float scale);

}  // namespace partrain::worker
