// The worker's training loop on a data-parallel layout (tp = pp = ep = cp = 1): each dp rank
// takes its slice of every global batch, runs forward/backward on its micro-batches, hands
// the finished gradient to the data plugin (bucketed all-reduce, average) once per
// optimizer step, then takes the same AdamW step as a single rank on the whole batch.
//
// Batch slicing, so the union over ranks is the single-rank batch: with global batch G,
// micro-batch b, dp ranks D and m = G / (b D) micro-batches per rank, micro-batch k of dp
// rank d reads global samples  step*G + (k*D + d)*b  ..  + b - 1.  Each rank scales its
// gradient by 1/m; the plugin's average over D gives 1/(m D) = b/G per micro-batch, the
// single-rank weighting.
//
// Overlap: on the last micro-batch the engine reports each block as its backward ends
// (final norm and head first, then blocks top down); its gradient ranges go to the plugin
// at once, so a full bucket is all-reduced while the blocks below are still in backward.
// The embeddings, finished last, go over when backward is done.
//
// Tensor parallel (tp > 1): every rank of a tp group reads the same batch slice (its dp
// coordinate's), builds its pieces of the model (engine/model/tensor_parallel.h) and runs
// the regions' collectives through the tensor plugin on the tp communicator; the dp groups
// (one per tp coordinate) sync each rank's local gradients as above.
//
// Expert parallel (ep > 1, engine/model/expert_parallel.h): each rank holds its E/ep
// experts of every MoE block and runs them for the tokens of its ep group (all-to-alls on
// the ep communicator, through the expert plugin: expert_plugin.h). The data plugin averages only the replicated
// parameters over the dp group; an expert's gradient already sums the contributions of
// every ep rank's micro-batches (each scaled 1/m), so it is summed over the
// expert-data-parallel group and divided by dp: b/G per micro-batch, the single-rank
// weighting.
#pragma once

#include <atomic>
#include <string>

#include "comm/communicator.h"
#include "common/status.h"
#include "config/job_config.h"
#include "engine/backend.h"
#include "layout/layout.h"
#include "partrain/expert.h"
#include "partrain/plugin.h"
#include "partrain/tensor.h"
#include "store/manifest.h"
#include "store/saver.h"

namespace partrain::worker {

struct DataParallelRun {
  const config::JobConfig* job = nullptr;
  int rank = 0;                  // global rank
  int world = 1;                 // ranks in the job
  int dp = 1;                    // data-parallel degree
  int dp_rank = 0;               // coordinate on the dp axis
  comm::Communicator* dp_comm = nullptr;            // null when dp == 1
  // The data plugin's table, v2 or v1 (exactly one set when dp > 1; both null when dp == 1).
  const partrain_strategy_v2_t* plugin_v2 = nullptr;
  const partrain_strategy_v1_t* plugin_v1 = nullptr;
  std::string plugin_config;     // its [plugins.NAME] table
  // Tensor parallel: degree, coordinate, sequence parallel, the tp group and the tensor
  // plugin's table (both set when tp > 1) and its [plugins.NAME] table.
  int tp = 1;
  int tp_rank = 0;
  bool sp = false;
  comm::Communicator* tp_comm = nullptr;
  const partrain_tensor_v1_t* tensor_plugin = nullptr;
  std::string tensor_config;
  // Expert parallel: degree, coordinate, the ep group (set when ep > 1) and the
  // expert-data-parallel group (the ranks holding the same experts; set when dp / ep > 1).
  int ep = 1;
  int ep_rank = 0;
  int expert_dp = 1;
  int expert_dp_rank = 0;
  comm::Communicator* ep_comm = nullptr;
  comm::Communicator* expert_dp_comm = nullptr;
  const partrain_expert_v1_t* expert_plugin = nullptr;  // set when ep > 1
  std::string expert_config;                            // its [plugins.NAME] table
  std::atomic<bool>* stop = nullptr;  // set by SIGTERM: stop at the next step boundary
  // Checkpoints: where shards go, who commits them (null: no checkpoints), and the
  // checkpoint to resume from (null: a fresh start).
  std::string ckpt_root;
  store::Committer* committer = nullptr;
  const store::Checkpoint* resume = nullptr;
};

// Trains job->training.steps steps (from the resume checkpoint's step on, when given),
// saving as [checkpoint] says: dp rank r writes the r-th 1/dp slice of every tensor (a ZeRO
// rank its shard, under tp as logical pieces). Rank 0 prints step lines and writes metrics.jsonl
// (the trainer's fields plus, per axis, dp_comm_ms: first gradient collective started to
// last finished, dp_exposed_ms: of that, the time the rank waited; tp_comm_ms = tp_exposed_ms:
// the time inside the regions' collectives; comm_ms, exposed_ms and collectives: the sums
// over the axes; exposed_share = exposed_ms / step_ms). unavailable when a peer
// failed; unavailable "stopped at step N" when *stop ended the run early.
Status train_data_parallel(const DataParallelRun& run);

// <run_dir>/memory.rank<R>.json: this rank's peak bytes per memory category (every
// layout's workers write it, for comparing layouts).
Status write_memory(const std::string& run_dir, int rank, const engine::MemoryStats& mem);

// The checkpoint saver's options for this rank of `run` (root, cadence, rank, dp slice,
// layout name, async), shared by the data-parallel and the pipeline loop; the caller sets
// `layout` where its rank writes something other than its 1/dp slice.
store::SaverOptions saver_options(const DataParallelRun& run);

}  // namespace partrain::worker
