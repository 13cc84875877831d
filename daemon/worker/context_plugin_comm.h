// The context plugin as the worker drives it: the engine's ContextComm
// (engine/model/context_parallel.h) on the plugin's C table (include/partrain/context.h)
// and this rank's cp communicator. The plugin calls back into the model's attention
// through the blocks table built for each call; the K/V blocks, their gradients and the
// scratch are the backend's tensors (zeroed and added by the backend, never by the
// plugin). The engine cannot take an error mid-forward, so the first failure is kept,
// every later call is skipped, and status() reports it at the next step boundary.
#pragma once

#include <string>

#include "comm/communicator.h"
#include "common/status.h"
#include "engine/backend.h"
#include "engine/model/context_parallel.h"
#include "partrain/context.h"

namespace partrain::worker {

class ContextPluginComm final : public engine::model::ContextComm {
 public:
  // `api`, `cp` and `backend` must outlive this object.
  ContextPluginComm(const partrain_context_v1_t* api, comm::Communicator* cp, engine::Backend* backend)
      : api_(api), cp_(cp), be_(backend) {}
  ~ContextPluginComm() override;  // finalizes the instance
  ContextPluginComm(const ContextPluginComm&) = delete;
  ContextPluginComm& operator=(const ContextPluginComm&) = delete;

  Status init(const std::string& config_toml, int global_rank, int world);

  int scratch_blocks() const override { return scratch_blocks_; }
  void forward(const engine::Tensor& kv, const engine::Tensor& scratch, const Attend& attend) override;
  void backward(const engine::Tensor& kv, const engine::Tensor& dkv, const engine::Tensor& scratch,
                const AttendBackward& attend_backward) override;
  void all_gather(const engine::Tensor& full, const engine::Tensor& part) override;

  // The first error, or OK.
  const Status& status() const { return status_; }
  // The step's transfers (the plugin's step_end).
  Status step_end(partrain_context_stats_v1_t* stats);

 private:
  struct Call;  // one forward's or backward's callbacks (context_plugin_comm.cc)
  partrain_context_blocks_v1_t blocks(Call* call, const engine::Tensor& kv, const engine::Tensor& dkv,
                                      const engine::Tensor& scratch);
  void keep(int rc, const char* what);

  const partrain_context_v1_t* api_;
  comm::Communicator* cp_;
  engine::Backend* be_;
  partrain_comm_v2_t comm_{};
  partrain_p2p_v1_t p2p_{};
  void* state_ = nullptr;
  int scratch_blocks_ = 0;
  Status status_;
  char err_[1024] = {0};
};

}  // namespace partrain::worker
