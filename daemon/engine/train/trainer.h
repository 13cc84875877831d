// The single-rank training loop, llm.c style: for each optimizer step, read the global
// batch in micro-batches, forward + backward each (gradients accumulate, scaled 1/m),
// clip, AdamW, log. Used by `partrain run`; the multi-rank worker will drive the same
// Model/AdamW through strategy plugins.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/data/dataset.h"
#include "engine/model/model.h"
#include "engine/options.h"
#include "engine/train/optimizer.h"

namespace partrain::engine::train {

struct RunOptions {
  ModelOptions model;
  TrainOptions train;
  DataOptions data;
  std::string name = "run";    // job name, for the log
  std::string run_dir;         // metrics.jsonl is written here; "" = no metrics file
  std::string device = "cpu";  // cpu | cuda | cuda:N
  std::string init_path;       // start from these weights (Hugging Face safetensors)
  std::string save_path;       // write the final weights here (Hugging Face safetensors)
  bool progress_bar = false;   // redraw a bar under the step lines (stdout is a TTY)
  bool quiet = false;          // no step lines (tests, and every rank but 0)
  // Data parallel: this rank reads its slice of every global batch (see Trainer::step) and
  // train.micro_batch is the per-rank micro-batch. One rank: dp 1, dp_rank 0.
  int dp = 1;
  int dp_rank = 0;
  // ZeRO: what this rank keeps only as its shard (the worker's data plugin decides).
  model::ShardOptions shard;
  // Tensor parallel: this rank's coordinate and the group (the worker sets the comm).
  model::TensorOptions tp;
  // Expert parallel: this rank's coordinate and the ep group (the worker sets the comm).
  model::ExpertOptions ep;
  // Throughput accounting: ranks in the job (0 = dp), model FLOPs per token (6N plus
  // attention, what MFU counts; the planner's formula) and the peak FLOP/s of one rank's
  // device (a hardware profile). MFU is reported when both are > 0. Default: 0
  int world = 0;
  double model_flops_per_token = 0;
  double peak_flops_per_rank = 0;
  // Set (by SIGTERM) to stop at the next step boundary; null = never. Multi-rank runs
  // agree on stopping through StepHooks::stop_requested instead.
  const std::atomic<bool>* stop = nullptr;
};

// The parallel axes whose collectives a step reports, in metrics.jsonl order; the names
// are the key prefixes (`dp_comm_ms`, `dp_exposed_ms`, ...). An axis joins by adding its
// collectives with StepMetrics::add_comm.
enum class CommAxis { kDp, kTp, kPp, kEp };
inline constexpr int kNumCommAxes = 4;
inline const char* comm_axis_name(CommAxis a) {
  constexpr const char* kNames[kNumCommAxes] = {"dp", "tp", "pp", "ep"};
  return kNames[static_cast<int>(a)];
}

// One axis' collectives in a step. comm_ms: the time they took (dp: first started to last
// finished; tp: the time inside them); exposed_ms: the part this rank waited for them,
// not hidden behind compute (<= comm_ms).
struct AxisComm {
  double comm_ms = 0, exposed_ms = 0;
  int collectives = 0;
};

// One optimizer step's numbers, as written to metrics.jsonl.
struct StepMetrics {
  int64_t step = 0;        // 1-based
  double loss = 0;         // mean over the global batch (cross-entropy + MoE aux)
  float lr = 0;
  float grad_norm = 0;     // before clipping
  int64_t tokens = 0;      // tokens trained on so far, this step included
  double step_ms = 0, fwd_ms = 0, bwd_ms = 0, opt_ms = 0;
  double data_ms = 0;       // reading the step's samples (the data-loading share of step_ms)
  // Collectives of the step (dp > 1 or tp > 1), per axis and in total: comm_ms,
  // exposed_ms and collectives are the sums over the axes (add_comm keeps them so).
  int dp = 1;
  int tp = 1;
  std::array<AxisComm, kNumCommAxes> axes{};
  double comm_ms = 0, exposed_ms = 0;
  int collectives = 0;
  void add_comm(CommAxis a, double comm, double exposed, int count) {
    AxisComm& x = axes[static_cast<size_t>(a)];
    x.comm_ms += comm;
    x.exposed_ms += exposed;
    x.collectives += count;
    comm_ms += comm;
    exposed_ms += exposed;
    collectives += count;
  }
  // A checkpoint saved after this step: how long training waited for it and how fast
  // its shard was written (0 when none).
  double save_stall_ms = 0;
  double save_mb_per_s = 0;
  // Throughput of the step: tokens/s of the job and per rank, and the model FLOPs
  // utilisation (0 when the run has no FLOP count or peak; see RunOptions).
  double tokens_per_s = 0, tokens_per_s_per_rank = 0, mfu = 0;
  // MoE models only (moe_experts > 0): the step's routing over the global batch (the worker
  // sums them over the dp group): kept (token, expert) rows per [MoE block][expert], the
  // choices dropped beyond capacity, and the mean auxiliary loss (part of `loss`).
  std::vector<int64_t> expert_tokens;
  int64_t dropped_tokens = 0;
  double aux_loss = 0;
  int experts = 0;  // E, to print expert_tokens per block; 0 for a dense model
  int ep = 1;
  // This rank's peak bytes per memory category so far (engine/backend.h MemoryStats).
  std::array<size_t, kNumMemCategories> peak_bytes{};
};

// What a parallel strategy adds to the single-rank step; the worker implements it, one
// rank needs none. Every call may fail with the peer or plugin error that stops the run.
class StepHooks {
 public:
  virtual ~StepHooks() = default;
  // Before the first micro-batch of optimizer step `step` (0-based).
  virtual Status begin_step(int64_t step) = 0;
  // During this rank's last backward of the step, as soon as block `layer`'s gradients are
  // final: a sync may start on them while the blocks below are still in backward.
  virtual Status block_grads_ready(model::Model& model, int layer) = 0;
  // After this rank's last backward of the step: the gradients hold this rank's share
  // (scaled 1/grad_accum); on return they hold the global batch's. Times go into *m.
  virtual Status sync_grads(model::Model& model, StepMetrics* m) = 0;
  // After the optimizer step: e.g. ZeRO-1/2 gathers the updated shards into the full
  // parameters, and the step's collective times go into *m.
  virtual Status after_step(model::Model& /*model*/, StepMetrics* /*m*/) { return Status::ok(); }
  // This rank's mean loss in, the global batch's mean out.
  virtual Status reduce_loss(double* loss) = 0;
  // True when some rank was asked to stop (SIGTERM): run() ends after this step.
  virtual bool stop_requested() const = 0;
};

class Trainer;

// Checkpointing, seen from the training loop: called after every optimizer step (the
// engine knows nothing of files or stores; daemon/store implements it). `final` is set
// after the last step of this run (train.steps reached, or a stop was requested): a save
// is due then. Fills m->save_* when it saved.
class SaveHook {
 public:
  virtual ~SaveHook() = default;
  virtual Status after_step(Trainer& trainer, bool final, StepMetrics* m) = 0;
};

// One metrics.jsonl line (no trailing newline); the collective fields only when dp > 1,
// tp > 1 or some axis had collectives, and `<axis>_comm_ms` / `<axis>_exposed_ms` only for
// the axes that had some.
std::string metrics_json(const StepMetrics& m);
// The step line's tail after its throughput: MoE routing, collective time and its exposed
// part per axis, checkpoint stall; "" when there is none. Every training loop prints it.
std::string step_summary(const StepMetrics& m);
// Opens metrics.jsonl for a run resumed after step `resumed_at` (0: a fresh run): keeps the
// lines of the steps up to it and drops those a crash left after it, so the file reads as
// one uninterrupted run.
Status open_metrics(const std::string& path, int64_t resumed_at, std::ofstream* out);

class Trainer {
 public:
  // Opens the data, the device, builds and initialises (or loads) the model.
  static Result<std::unique_ptr<Trainer>> create(const RunOptions& options);
  ~Trainer();

  // Data-parallel runs sync gradients and the loss through `hooks` (not owned; may be null).
  void set_hooks(StepHooks* hooks) { hooks_ = hooks; }
  // Checkpoints after each step through `hook` (not owned; may be null).
  void set_save_hook(SaveHook* hook) { save_hook_ = hook; }

  // One optimizer step over global_batch sequences (this rank's slice of them).
  Result<StepMetrics> step();
  // Every step up to train.steps, with step lines, metrics.jsonl and --save.
  Status run();

  model::Model& model() { return *model_; }
  Backend& backend() { return *backend_; }
  int grad_accum() const { return accum_; }
  const RunOptions& options() const { return o_; }
  AdamW& optimizer() { return *opt_; }
  uint64_t num_windows() const { return data_->num_windows(); }

  // Checkpoint/resume: optimizer steps done and tokens trained on. After the weights and
  // moments were restored, set_progress(step) makes run() continue at step + 1 with the
  // data, dropout and learning rate of that step (all functions of the step).
  int64_t steps_done() const { return step_; }
  int64_t tokens() const { return tokens_; }
  void set_progress(int64_t steps_done, int64_t tokens);

 private:
  Trainer() = default;
  void print_step(const StepMetrics& m) const;

  RunOptions o_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<AdamW> opt_;
  std::shared_ptr<data::TokenDataset> data_;
  std::unique_ptr<data::Sampler> sampler_;
  StepHooks* hooks_ = nullptr;
  SaveHook* save_hook_ = nullptr;
  int accum_ = 1;
  int64_t step_ = 0;  // optimizer steps done
  int64_t tokens_ = 0;
  std::vector<int32_t> inputs_, targets_;
};

}  // namespace partrain::engine::train
