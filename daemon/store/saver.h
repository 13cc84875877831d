// The rank's side of checkpointing, as a trainer SaveHook: every [checkpoint] every steps,
// after the last step and at a SIGTERM stop, copy this rank's pieces of the weights and
// Adam moments to host memory, write them as one shard file (shard_file.h) and hand the
// piece records to a Committer (the coordinator commits once every rank's are in).
// Restoring reads back whatever ranges this rank needs from the pieces of any layout.
//
// Asynchronous saving: the copy to host memory (into a buffer kept from save to save,
// staging_buffer.h) is the only stall; a background thread writes and commits while
// training goes on. On a CPU rank even the copy leaves the step: the background thread
// makes it while the next step's forward and backward read the same state, and that step's
// optimizer update waits for it (before_update). A save that falls due while the previous one
// is still running waits for it first; the final save is waited for before run() returns.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "engine/model/params.h"
#include "engine/model/sharding.h"
#include "engine/train/trainer.h"
#include "store/manifest.h"
#include "store/shard_file.h"
#include "store/staging_buffer.h"

namespace partrain::store {

// The model's tensors under their Hugging Face names, in table order.
std::vector<LogicalTensor> logical_tensors(const engine::model::ParamTable& table);

// A piece of state a rank holds on its device: what it is (tensor, role, [begin, end)) and
// the contiguous device elements that hold it (spec.end - spec.begin of them).
struct PieceView {
  PieceSpec spec;
  engine::Tensor tensor;
};

// Which pieces a rank writes at a save and which it fills at a restore: the interface a
// sharding strategy implements, part by part of the trainer (the whole model, or each
// pipeline stage it holds; a tied head's copy of the embedding is left to the first stage).
// Plain dp (ReplicatedDpLayout) holds everything on every rank, writes the dp_rank-th 1/dp
// slice of each tensor and reads everything back; a ZeRO rank writes and reads the flat
// ranges of the moments it owns and whatever weights it holds; a tp or pipeline rank the
// dp_rank-th slice of its flat buffers as logical pieces; a tp x ZeRO rank the logical pieces
// of its ZeRO shard.
class StateLayout {
 public:
  virtual ~StateLayout() = default;
  std::vector<PieceView> save_views(engine::train::Trainer& trainer);
  std::vector<PieceView> restore_views(engine::train::Trainer& trainer);

 protected:
  virtual std::vector<PieceView> save_part(engine::model::Model& model, engine::train::AdamW& opt) = 0;
  virtual std::vector<PieceView> restore_part(engine::model::Model& model, engine::train::AdamW& opt) = 0;
};

class ReplicatedDpLayout final : public StateLayout {
 public:
  ReplicatedDpLayout(int dp, int dp_rank) : dp_(dp), dp_rank_(dp_rank) {}

 protected:
  std::vector<PieceView> save_part(engine::model::Model& model, engine::train::AdamW& opt) override;
  std::vector<PieceView> restore_part(engine::model::Model& model, engine::train::AdamW& opt) override;

 private:
  int dp_, dp_rank_;
};

// A ZeRO rank (stage 1-3, engine/model/sharding.h), alone or over tensor-parallel pieces,
// with or without experts: it holds the shard's flat ranges of its flat buffer (under tp
// the buffer of its tp rank's pieces) for the weights and both moments (the optimizer holds
// them for the shard only). It writes those ranges as logical pieces (shard_pieces: a
// row-parallel weight's range is one piece per row), leaving tensors every tp rank holds
// whole to tp rank 0: each tp coordinate's dp group covers its dense tensors once and each
// ep rank's expert-dp group its experts once (engine/model/shard_views.h), so the ranks
// together cover every logical element once. It reads the same ranges back (the replicated
// tensors too), and below stage 3 the whole weights, which it holds.
class ZeroStateLayout final : public StateLayout {
 public:
  explicit ZeroStateLayout(int stage, int tp_rank = 0) : stage_(stage), tp_rank_(tp_rank) {}

 protected:
  std::vector<PieceView> save_part(engine::model::Model& model, engine::train::AdamW& opt) override;
  std::vector<PieceView> restore_part(engine::model::Model& model, engine::train::AdamW& opt) override;

 private:
  int stage_, tp_rank_;
};

// A tensor-parallel or pipeline rank (no ZeRO; with ZeRO see ZeroStateLayout): its tensors
// are pieces of the logical tensors (engine/model/params.h ParamSpec::pieces), or a stage's
// whole tensors. dp rank d of each tp coordinate and stage writes the d-th 1/dp slice of each
// part's flat buffer, as logical ranges; tensors every tp rank holds whole (norms,
// row-parallel biases, positions) only tp rank 0 writes. A restore reads every local piece
// back, from pieces of any layout.
class FlatSliceLayout final : public StateLayout {
 public:
  FlatSliceLayout(int tp_rank, int dp, int dp_rank) : tp_rank_(tp_rank), dp_(dp), dp_rank_(dp_rank) {}

 protected:
  std::vector<PieceView> save_part(engine::model::Model& model, engine::train::AdamW& opt) override;
  std::vector<PieceView> restore_part(engine::model::Model& model, engine::train::AdamW& opt) override;

 private:
  int tp_rank_, dp_, dp_rank_;
};

// An expert-parallel rank (ep > 1, no ZeRO; with tp and inside pipeline stages too): it
// holds the replicated tensors (under tp its pieces of them) and only its ep shard's
// experts (engine/model/expert_parallel.h), whole on every tp rank, under their logical
// names. dp rank d writes the d-th 1/dp slice of every replicated tensor; of its experts,
// the expert-data-parallel rank e writes the e-th 1/expert_dp slice (the ranks holding the
// same experts share them); tensors every tp rank holds whole (norms, routers, experts)
// only tp rank 0 writes. A restore reads every local tensor back, from pieces of any layout.
class ExpertParallelLayout final : public StateLayout {
 public:
  ExpertParallelLayout(int dp, int dp_rank, int expert_dp, int expert_dp_rank, int tp_rank = 0)
      : dp_(dp), dp_rank_(dp_rank), expert_dp_(expert_dp), expert_dp_rank_(expert_dp_rank), tp_rank_(tp_rank) {}

 protected:
  std::vector<PieceView> save_part(engine::model::Model& model, engine::train::AdamW& opt) override;
  std::vector<PieceView> restore_part(engine::model::Model& model, engine::train::AdamW& opt) override;

 private:
  int dp_, dp_rank_, expert_dp_, expert_dp_rank_, tp_rank_;
};
// Restores `layout`'s views (plain dp when null: all weights and both Adam moments) from the
// checkpoint's pieces (of any layout: each range is read from whichever pieces overlap it,
// every piece read is verified), then every part's AdamW step count and the trainer's step
// counters. `announce` (one rank of the job) logs where the run resumes, and warns when the
// checkpoint already reaches [training] steps.
Status restore_trainer(engine::train::Trainer& trainer, const std::string& root, const Checkpoint& c,
                       StateLayout* layout, bool announce);

// `partrain run --init`: the weights of `layout`'s views (and the fp32 master copies where
// kept) from Hugging Face safetensors (a file or a model folder), each rank reading only the
// logical slices it holds, by name, on any layout (tp pieces, pipeline stages, ZeRO shards,
// experts); the Adam moments stay zero and the run starts at step 0.
Status init_from_hf(engine::train::Trainer& trainer, const std::string& path, StateLayout* layout);

// Tells the coordinator that this rank's shard of step `step` is durable and waits until
// the checkpoint is committed. The same for every rank; `state` matters from rank 0.
class Committer {
 public:
  virtual ~Committer() = default;
  virtual Status commit(const TrainState& state, int rank, std::vector<PieceRecord> pieces) = 0;
};

struct SaverOptions {
  std::string root;        // checkpoint root. Required
  int64_t every = 0;       // save every N steps; 0 = only the final save. Default: 0
  int rank = 0;            // this rank (names its shard file)
  int world = 1;           // ranks writing pieces
  int dp = 1, dp_rank = 0; // plain dp: this rank writes the dp_rank-th 1/dp slice of every tensor
  StateLayout* layout = nullptr;  // what this rank writes; null = ReplicatedDpLayout(dp, dp_rank)
  std::string layout_name; // e.g. "dp2", recorded in the state
  bool async = false;      // write and commit on a background thread. Default: false
};

class CheckpointSaver final : public engine::train::SaveHook {
 public:
  CheckpointSaver(SaverOptions options, Committer* committer);
  ~CheckpointSaver() override;  // waits for a save in flight

  // Saves when due (every N steps, and the final step): this rank's pieces (the layout's
  // save views) copied to host memory, then written and committed.
  Status after_step(engine::train::Trainer& trainer, bool final, engine::train::StepMetrics* m) override;
  // Before the optimizer step: waits for an asynchronous save's copy of the state, if any.
  Status before_update(engine::train::StepMetrics* m) override;
  // Waits for the save in flight, if any; its status.
  Status wait();

 private:
  struct Snapshot;
  Status write_and_commit(const Snapshot& s);
  void copy_and_write_in_background(std::shared_ptr<Snapshot> snap, const std::vector<PieceView>& views);

  SaverOptions o_;
  Committer* committer_;
  std::thread thread_;        // the save in flight (async)
  Status async_status_;       // its result, read after join
  StagingBuffer staging_;     // the snapshot's host copy, reused by every save
  // A CPU rank's asynchronous save copies the state on its thread: set until it has.
  std::mutex copy_mu_;
  std::condition_variable copy_done_;
  bool copy_pending_ = false;
  double last_mb_per_s_ = 0;  // of the last finished save
};

}  // namespace partrain::store
