// One rank's training run, for every layout: the trainer (engine/train/trainer.h, the one
// loop) built on this rank's slice of the job, with the strategies of its groups plugged in:
//
//   data plugin (dp > 1)      gradient sync; under ZeRO also where state lives (its plan comes
//                             first, so sharded state is never allocated full-size)
//   tensor plugin (tp > 1)    the Megatron regions' collectives inside the model
//   expert plugin (ep > 1)    the MoE all-to-alls inside the model, the experts' gradient sum
//   context plugin (cp > 1)   the K/V exchange of attention inside the model; the data plugin
//                             then reduces over dp x cp (cp ranks hold the same weights)
//   pipeline (pp > 1)         this rank's stages as the trainer's parts, run by the schedule's
//                             executor instead of the plain micro-batch loop
//   ParallelHooks             the step's collectives over all of them (parallel_hooks.h)
//   checkpoints               what this rank writes (store::StateLayout) and the resume
//
// Follow a step: Trainer::step -> ParallelHooks::begin_step -> SequentialMicroBatches or
// PipelineExecutor -> ParallelHooks::sync_grads / reduce_loss / reduce_norm -> AdamW on every
// part -> ParallelHooks::after_step -> CheckpointSaver -> metrics.jsonl (rank 0).
#pragma once

#include <atomic>
#include <string>

#include "common/status.h"
#include "config/job_config.h"
#include "layout/layout.h"
#include "store/manifest.h"
#include "store/saver.h"
#include "worker/pipeline_plan.h"
#include "worker/process_groups.h"
#include "worker/strategies.h"

namespace partrain::worker {

struct WorkerRun {
  const config::JobConfig* job = nullptr;
  const Layout* layout = nullptr;
  int rank = 0;                          // global rank
  ProcessGroups* groups = nullptr;       // this rank's communicators
  Strategies* strategies = nullptr;      // the plugins its groups run
  const PipelinePlan* pipeline = nullptr;  // pp > 1: the checked schedule and partition
  const std::atomic<bool>* stop = nullptr;  // SIGTERM: stop at the next step boundary
  // MFU accounting: model FLOPs per token and one rank's peak FLOP/s (0: no MFU).
  double model_flops_per_token = 0;
  double peak_flops_per_rank = 0;
  // Checkpoints: where shards go, who commits them (null: no checkpoints), and the
  // checkpoint to resume from (null: a fresh start).
  std::string ckpt_root;
  store::Committer* committer = nullptr;
  const store::Checkpoint* resume = nullptr;
  // A fresh start's weights (partraind --init: Hugging Face safetensors); "" = the seed's.
  std::string init;
  // `partrain run` on one rank (a world of one, no agent): the final weights written here as
  // Hugging Face safetensors ("" = none), and a progress bar on its terminal.
  std::string save_path;
  bool progress_bar = false;
};

// Trains job->training.steps steps (from the resume checkpoint's step on), saving as
// [checkpoint] says. unavailable when a peer failed; unavailable "stopped at step N" when
// the group decided to stop early. On any error every group's operations in flight are
// failed first (ProcessGroups::abort_all), then the plugins and the model are freed.
// Every rank writes <run_dir>/memory.rank<R>.json (its peak bytes per memory category).
Status train(const WorkerRun& run);

}  // namespace partrain::worker
