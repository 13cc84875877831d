// The collectives of one optimizer step for every layout, as the trainer's StepHooks
// (engine/train/step_hooks.h): one rank's tp, ep, pp and dp/ZeRO strategies together, in
// the order every rank of a group issues them.
//
//   begin_step          the data plugin's step_begin
//   block/part ready    gradient ranges to the data plugin as backward finishes them (stage
//                       0/1; ZeRO-2/3 models hand their segments over themselves), so a full
//                       bucket is all-reduced while the blocks below are still in backward
//   sync_grads          the data plugin finishes (dp: averaged over the dp group, which links
//                       one tp coordinate of one stage; under cp the dp x cp group); the
//                       experts' gradients summed over the expert-dp group and scaled
//                       1/(dp cp) (each already holds every ep rank's tokens; under ZeRO the
//                       experts' own plugin instance did it, zero_comm.h); GPT-2's tied wte
//                       summed between the first and last stage; the MoE routing summed over
//                       tp, pp and dp (x cp: each tp and cp rank counts its own rows)
//   reduce_loss         the stop flag agreed over tp (max); loss and flag summed over pp (the
//                       last stage has the cross-entropy, every stage its aux losses); the
//                       loss averaged over dp (summed over cp first: each cp rank holds its
//                       share of the mean)
//   reduce_norm         experts' squares over ep (ZeRO: the dp sum covers their expert-dp
//                       shards), the shards' over dp (ZeRO), the pieces' over
//                       tp, the stages' over pp (grad_norm.h says who counts what)
//   after_step          ZeRO-1/2 gather the updated shards; the step's collective times
//
// Under tp, a MoE block's router and experts (ParamSpec::tp_summed: each tp rank routed its
// own tokens) are summed over tp where they are handed to the data plugin (ZeRO: in
// ZeroComm), or in sync_grads without one; the routing counts are summed over tp too.
//
// Batch weighting: each rank scales its micro-batches 1/m (m = grad_accum), the dp average
// makes it 1/(m dp) = b/G per micro-batch, the one-rank weighting. Under cp each rank's
// gradient is cp times its share of the micro-batch (engine/model/context_parallel.h), so
// the average over dp x cp is the same.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "common/status.h"
#include "engine/train/step_hooks.h"
#include "engine/train/trainer.h"
#include "worker/context_plugin_comm.h"
#include "worker/data_plugin_comm.h"
#include "worker/expert_plugin_comm.h"
#include "worker/tensor_plugin_comm.h"
#include "worker/zero_comm.h"

namespace partrain::worker {

// What one rank's step drives, each null where its axis has one rank.
struct ParallelAxes {
  DataPluginComm* data = nullptr;      // dp > 1: the data plugin (dp, zeroN) on the dense view
  DataPluginComm* expert_data = nullptr;  // ZeRO with ep > 1: its instance on the experts' view
  std::vector<ZeroComm*> zero;         // ZeRO stage >= 1: each model part's ShardComm
  TensorPluginComm* tensor = nullptr;  // tp > 1
  ExpertPluginComm* expert = nullptr;  // ep > 1
  ContextPluginComm* context = nullptr;  // cp > 1
  // Host channels (process_groups.h) of the groups whose host values the step reduces.
  comm::Communicator* tp_host = nullptr;  // tp > 1: the stop flag, routing counts
  comm::Communicator* pp_host = nullptr;  // pp > 1: losses, norm, routing
  comm::Communicator* dp_host = nullptr;  // dp x cp > 1: loss, stop, routing over the data group
  comm::Communicator* pp = nullptr;    // pp > 1: the pp group's transport (the tied embedding)
  comm::Memory memory = comm::Memory::kHost;  // where the backend's tensors live
  int dp = 1;
  int cp = 1;
};

class ParallelHooks final : public engine::train::StepHooks {
 public:
  ParallelHooks(engine::train::Trainer& trainer, const ParallelAxes& axes);

  Status begin_step(int64_t step) override;
  Status block_grads_ready(int part, int layer) override;
  Status part_grads_ready(int part) override;
  Status sync_grads(engine::train::StepMetrics* m) override;
  Status reduce_loss(double* loss, bool* stop) override;
  Status reduce_norm(const engine::train::GradSquares& local, double* total) override;
  Status after_step(engine::train::StepMetrics* m) override;

 private:
  int stage() const { return a_.data->plan().stage; }
  engine::model::Model& model(int part) { return *trainer_.parts()[static_cast<size_t>(part)].model; }
  Status hand_over(int part, size_t tensor);
  Status sum_over_tp(const engine::Tensor& grad, const engine::model::ParamSpec& spec);
  Status zero_status() const;
  Status sum_tied_embeddings();
  Status reduce_moe_stats(engine::train::StepMetrics* m);

  engine::train::Trainer& trainer_;
  ParallelAxes a_;
  std::vector<std::vector<bool>> handed_;    // per part and tensor: given to the plugin this step
};

}  // namespace partrain::worker
