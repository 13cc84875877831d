// The pipeline executor (pp > 1): what runs one optimizer step's micro-batches on a
// pipeline stage. It replaces the trainer's "forward and backward each micro-batch" with this
// rank's checked action list (pipeline_plan.h), on its stage models (the trainer's parts, one
// per chunk), with point-to-point transfers on the pp group; everything else in the step is
// the one loop's (engine/train/trainer.h).
//
// Transfers, as daemon/pipeline/README.md says: a send is posted and returns; its buffer
// stays untouched until the step's actions end (activations go straight from the stage's
// output slot, which is reused only after the micro-batch's gradient came back; input
// gradients from one buffer per micro-batch and chunk). Receives are posted ahead of their
// actions, in the list's order, as soon as their buffers are free (Gloo moves a payload only
// once its receive is posted), and waited for by the compute action that needs them, so a
// transfer overlaps the compute before that action. Activations and gradients travel on the
// pp channels of process_groups.h, one per stream and direction, so each stream's messages
// match in the order the list issues them (what pipeline::check verifies), never by tag;
// they are typed as the stage's activations (bf16 where the backend stores bf16).
//
// A chunk's gradients are final after its m-th backward (or backward-weight under ZB-H1):
// the hooks' part_grads_ready hands them to the data plugin while the rest of the schedule
// runs. With tp > 1 the pp group links the same tp coordinate of every stage, so each rank
// sends the residual rows it holds (N/tp of them under sequence parallelism).
//
// Per step the executor adds to the metrics: pp_comm_ms (first transfer posted to the last
// done), pp_exposed_ms (the waits for them), and the measured bubble, 1 - sum(busy) /
// (pp x makespan) over the ranks' real action timelines.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "common/status.h"
#include "engine/train/step_hooks.h"
#include "engine/train/trainer.h"
#include "pipeline/schedule.h"
#include "worker/process_groups.h"

namespace partrain::worker {

class PipelineExecutor final : public engine::train::MicroBatchRunner {
 public:
  // `actions` is this rank's list of `schedule`; `groups` holds its pp channels and `pp_host`
  // is the pp group's host channel (the bubble's timings); `memory` where the backend's
  // tensors live. The trainer's parts are this rank's chunks, in chunk order.
  PipelineExecutor(const pipeline::Shape& shape, const std::vector<pipeline::Action>& actions,
                   const ProcessGroups* groups, comm::Communicator* pp_host, comm::Memory memory);
  ~PipelineExecutor() override;
  // Allocates the transfer buffers of every chunk of `trainer`.
  Status init(engine::train::Trainer& trainer);

  Status run(engine::train::Trainer& trainer, engine::train::StepMetrics* m, double* loss,
             double* aux) override;
  // Validation: each micro-batch through the stages in order, forward only, in activation
  // slot 0 (free between steps).
  Status evaluate(engine::train::Trainer& trainer, int count, double* ce) override;

 private:
  using Clock = std::chrono::steady_clock;
  // One chunk's transfer state (its stage model is the trainer's part of the same index).
  struct Chunk {
    std::vector<engine::Tensor> grad_in;   // per slot: the received gradient of the output
    std::vector<engine::Tensor> grad_out;  // per micro-batch: the input gradient being sent
    std::vector<int> slot_of;              // per micro-batch: its activation slot, or -1
    std::vector<int> free_slots;
    std::vector<comm::WorkHandle> recv_act, recv_grad;  // per micro-batch, pending receives
    int backwards = 0;                     // backwards done this step
  };

  void start_step();
  int slot(Chunk& c, int mb);
  void post_receives();
  Status wait_recv(comm::WorkHandle& h, const pipeline::Action& a);
  Status forward(int chunk, const pipeline::Action& a, engine::train::StepMetrics* m, double* loss, double* aux);
  Status backward(int chunk, const pipeline::Action& a);
  Status run_action(const pipeline::Action& a, engine::train::StepMetrics* m, double* loss, double* aux);
  engine::model::Model& model(int chunk) { return *trainer_->parts()[static_cast<size_t>(chunk)].model; }
  // Starts the transfer of `t` to (send) or from pp rank `peer` on the stream's channel.
  comm::WorkHandle transfer(PpStream stream, bool send, int peer, const engine::Tensor& t);

  const pipeline::Shape shape_;
  const std::vector<pipeline::Action>& actions_;
  const ProcessGroups* groups_;
  comm::Communicator* pp_host_;
  comm::Memory memory_;
  engine::train::Trainer* trainer_ = nullptr;
  std::vector<Chunk> chunks_;
  size_t count_ = 0;                     // elements of one transfer (the residual rows held)
  std::vector<size_t> recvs_;            // the positions of the list's receives, in order
  size_t next_recv_ = 0;                 // the first of them not posted yet this step
  std::vector<comm::WorkHandle> sends_;  // this step's, waited for at its end
  int transfers_ = 0;                    // this rank's sends and receives per step
  // This step's timeline: first action start, last action end, busy time (wall-clock us),
  // and the point-to-point time (first posted to last done) and the waits for it.
  int64_t t_begin_ = 0, t_end_ = 0, busy_us_ = 0;
  Clock::time_point p2p_first_{}, p2p_last_{};
  bool p2p_any_ = false;
  double exposed_ms_ = 0;
};

}  // namespace partrain::worker
