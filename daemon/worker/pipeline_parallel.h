// The worker's pipeline-parallel runtime (pp > 1): runs a checked schedule (daemon/pipeline)
// on this rank's stage models, with point-to-point transfers on the pp communicator, so a
// pp run trains exactly what one rank trains.
//
// Placement (include/partrain/schedule.h): with v chunks per rank there are S = pp * v
// stages, stage s = chunk * pp + rank; daemon/pipeline/partition splits the blocks into
// them by estimated cost (the embeddings with stage 0, the head with stage S-1). Each chunk
// is one engine stage model (engine/model/stage.h) with as many activation slots as the
// schedule has micro-batches in flight on that chunk (GPipe m, 1F1B at most pp). ZB-H1's
// backward-input computes the input gradients and keeps each GEMM's output gradient;
// its backward-weight computes the weight gradients from them later (never a no-op).
//
// Transfers, as daemon/pipeline/README.md says: a send is posted and returns; its buffer
// stays untouched until the step ends (activations go straight from the stage's output
// slot, which is reused only after the micro-batch's gradient came back; input gradients
// from one buffer per micro-batch and chunk). Receives are posted ahead of their actions,
// in the list's order, as soon as their buffers are free (Gloo moves a payload only once
// its receive is posted), and waited for by the compute action that needs them, so a
// transfer overlaps the compute before that action.
// Per ordered pair of ranks, activations and gradients travel on two tags, each first in
// first out (pipeline/streams.h): Gloo matches per (peer, tag) in order.
//
// After the actions: the data plugin averages each stage's gradients over its dp group
// (pp x dp; stages never reduce each other's gradients), GPT-2's tied wte is summed between
// the first and the last stage (both copies stay equal), the clipping norm is the sum of
// squares over all stages (the tied tensor once), and every chunk takes the AdamW step.
// With tp > 1 each stage model is the tp coordinate's (the tp plugin on the tp group); the
// pp group links the same tp coordinate of every stage, so each rank sends the residual
// rows it holds (N/tp of them under sequence parallelism).
// With ep > 1 each stage model holds its E/ep experts of the stage's MoE blocks, whose
// all-to-alls run on the stage's ep group (its ranks share the stage and its action list);
// the data plugin averages only the replicated parameters, the experts' gradients are
// summed over the expert-dp group and divided by dp, and the norm sums the experts'
// squares over ep. MoE routing counts (each stage its own blocks) are summed over pp and dp.
// The loss (the last stage's cross-entropy plus every stage's MoE aux loss) is summed over
// pp and averaged over dp; global rank 0 writes metrics.jsonl with the measured bubble
// (1 - sum(busy) / (pp x makespan) over the ranks' real action timelines), pp_comm_ms and
// pp_exposed_ms. Checkpoints hold each stage's tensors by logical name (store/saver.h), so
// they resume on any layout and any layout's resume here.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "common/status.h"
#include "config/job_config.h"
#include "layout/layout.h"
#include "worker/data_parallel.h"
#include "pipeline/partition.h"
#include "pipeline/schedule.h"

namespace partrain::worker {

// What the worker decides before any rank talks to another: the checked schedule and the
// stage partition. Every rank computes the same.
struct PipelinePlan {
  pipeline::Schedule schedule;             // checked (pipeline::check)
  std::vector<pipeline::StagePart> parts;  // pp * v stages
  std::string source;                      // "1f1b 0.1.0 from PATH", for the log
};

// Loads the schedule plugin the spec names (sched=NAME[:V]) from `plugin_dir`, builds it
// for (pp, m = grad_accum, v), checks it and partitions the model. invalid with the
// checker's first violation for a bad schedule; invalid for a layout this runtime does not
// run yet (ZeRO with pp; a split backward (ZB-H1) with recompute, MoE blocks or tp).
Result<PipelinePlan> plan_pipeline(const config::JobConfig& job, const Layout& layout,
                                   const std::string& plugin_dir);

struct PipelineRun {
  // The job, the ranks, the dp and tp groups with their plugins and the stop flag, as the
  // data-parallel loop takes them, the ep and expert-dp groups with the expert plugin, and
  // the checkpoint fields.
  const DataParallelRun* run = nullptr;
  const PipelinePlan* plan = nullptr;
  int pp_rank = 0;                        // coordinate on the pp axis
  comm::Communicator* pp_comm = nullptr;  // the pp group: the stages' transfers
};

// Trains job->training.steps steps. unavailable when a peer failed, or "stopped at step N"
// when *stop ended the run early.
Status train_pipeline_parallel(const PipelineRun& run);

}  // namespace partrain::worker
