// The engine's ExpertComm (engine/model/expert_parallel.h) on this rank's ep communicator:
// the MoE dispatch and combine all-to-alls, each waited for at once (the next layer needs
// its rows), and the gradient norm's sum over the group. As TensorPluginComm: the engine
// cannot take an error mid-forward, so the first failure is kept, every later collective
// is skipped, and status() reports it at the next step boundary.
//
// The all-to-all runs here, in the worker, on the Communicator (comm/communicator.h
// all_to_allv); an `expert` plugin family is not there yet.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "common/status.h"
#include "engine/model/expert_parallel.h"

namespace partrain::worker {

class ExpertGroupComm final : public engine::model::ExpertComm {
 public:
  explicit ExpertGroupComm(comm::Communicator* ep) : ep_(ep) {}

  void all_to_allv(const float* in, const std::vector<size_t>& send_counts, float* out,
                   const std::vector<size_t>& recv_counts) override;
  double sum(double x) override;

  // The first error, or OK.
  const Status& status() const { return status_; }
  // The step's totals so far, then zeroed: time inside the collectives (all exposed),
  // collectives run.
  double take_comm_ms();
  int take_collectives();

 private:
  comm::Communicator* ep_;
  Status status_;
  double comm_ms_ = 0;
  int collectives_ = 0;
};

}  // namespace partrain::worker
