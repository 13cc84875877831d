// What a parallel layout adds to the one training loop (trainer.h), as three small
// interfaces the engine calls and the worker implements; one rank needs none of them.
//
//   StepHooks        the step's collectives: gradient sync, the loss and stop decision, the
//                    clipping norm, after-step gathers (dp/ZeRO, tp, ep, pp together)
//   MicroBatchRunner "run this step's micro-batches forward and backward" (and "these
//                    validation micro-batches forward"): one after the other by default
//                    (SequentialMicroBatches), a schedule's action list on a pipeline stage
//   SaveHook         checkpointing after a step (daemon/store implements it)
//
// Every call may fail with the peer or plugin error that stops the run.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "engine/train/step_metrics.h"

namespace partrain::engine::train {

class Trainer;

// This rank's share of the gradient's sum of squares: the dense tensors and the experts
// (under expert parallelism each expert lives on one rank of the ep group, so its squares
// are summed over that group before they join the rest).
struct GradSquares {
  double dense = 0;
  double experts = 0;
};

class StepHooks {
 public:
  virtual ~StepHooks() = default;
  // Before the first micro-batch of optimizer step `step` (0-based).
  virtual Status begin_step(int64_t step) = 0;
  // During part `part`'s last backward of the step, as soon as block `layer`'s gradients
  // are final: a sync may start on them while the blocks below are still in backward.
  virtual Status block_grads_ready(int part, int layer) = 0;
  // Every micro-batch's backward of part `part` is done: its gradients hold this rank's
  // share (scaled 1/grad_accum) and may be synced while other parts still compute.
  virtual Status part_grads_ready(int part) = 0;
  // After all parts' backward: on return the gradients hold the global batch's, and *m's
  // MoE routing is the global batch's. Times go into *m.
  virtual Status sync_grads(StepMetrics* m) = 0;
  // This rank's mean loss and stop request in; the global batch's loss and the group's
  // decision (stop when any rank was asked to) out, the same on every rank.
  virtual Status reduce_loss(double* loss, bool* stop) = 0;
  // This rank's squares in; the whole model's sum of squares out.
  virtual Status reduce_norm(const GradSquares& local, double* total) = 0;
  // After the optimizer step: e.g. ZeRO-1/2 gathers the updated shards into the full
  // parameters; the step's collective times go into *m.
  virtual Status after_step(StepMetrics* m) = 0;
};

// Runs one optimizer step's micro-batches through this rank's model parts, forward and
// backward (gradients accumulate, each micro-batch scaled 1/grad_accum), calling the
// hooks' block_grads_ready / part_grads_ready as gradients become final. Adds this rank's
// losses (cross-entropy of the micro-batches whose head it holds, plus its MoE aux losses)
// into *loss and *aux, and its times into *m.
class MicroBatchRunner {
 public:
  virtual ~MicroBatchRunner() = default;
  virtual Status run(Trainer& trainer, StepMetrics* m, double* loss, double* aux) = 0;
  // Evaluation: the forwards of this rank's `count` validation micro-batches
  // (trainer.read_eval_batch), no backward, no gradients; adds the cross-entropy of the
  // micro-batches whose head it holds into *ce.
  virtual Status evaluate(Trainer& trainer, int count, double* ce) = 0;
};

// Checkpointing, seen from the loop: called after every optimizer step. `final` is set
// after the last step of this run (train.steps reached, or a stop was decided): a save is
// due then. Fills m->save_* when it saved.
// before_update is called before each optimizer step changes the weights and moments: a
// save that copies them in the background while the next step's forward and backward run
// finishes that copy first (the wait goes into m->save_wait_ms).
class SaveHook {
 public:
  virtual ~SaveHook() = default;
  virtual Status after_step(Trainer& trainer, bool final, StepMetrics* m) = 0;
  virtual Status before_update(StepMetrics* /*m*/) { return Status::ok(); }
};

}  // namespace partrain::engine::train
