// The training loop: the one place that owns an optimizer step's bookkeeping for every
// layout. Per step, llm.c style:
//
//   hooks.begin_step                      (a data plugin's step_begin)
//   micro-batches forward + backward      (SequentialMicroBatches, or a pipeline schedule)
//   hooks.sync_grads                      (dp / ZeRO / ep / tied-embedding collectives)
//   hooks.reduce_loss                     (the global batch's loss, the agreed stop flag)
//   clip by the global norm, AdamW        (every model part: the whole model or its stages)
//   hooks.after_step                      (ZeRO-1/2 gathers, the step's collective times)
//   save hook, metrics.jsonl, step line, stop
//
// One rank (`partrain run`) runs it with no hooks; the worker gives it the hooks and, on a
// pipeline stage, the schedule's MicroBatchRunner (step_hooks.h). Data order is a function of
// the global sample index: micro-batch k of dp rank d of step s reads samples
// s*G + (k*D + d)*b .. + b - 1 (G global batch, D dp ranks, b micro-batch), so the union
// over the ranks is the one-rank batch and every layout learns the same.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/data/dataset.h"
#include "engine/model/model.h"
#include "engine/options.h"
#include "engine/train/optimizer.h"
#include "engine/train/step_hooks.h"
#include "engine/train/step_metrics.h"

namespace partrain::engine::train {

struct RunOptions {
  ModelOptions model;
  TrainOptions train;
  DataOptions data;
  std::string name = "run";    // job name, for the log
  std::string run_dir;         // metrics.jsonl is written here; "" = no metrics file
  std::string device = "cpu";  // cpu | cuda | cuda:N
  std::string precision;       // fp32 | bf16 | "" (the device's default); see make_backend
  std::string save_path;       // write the final weights here (Hugging Face safetensors)
  bool progress_bar = false;   // a progress bar with ETA below the step lines (stdout is a TTY)
  bool quiet = false;          // no step lines (tests, and every rank but 0)
  // Data parallel: this rank reads its slice of every global batch and train.micro_batch
  // is the per-rank micro-batch. One rank: dp 1, dp_rank 0.
  int dp = 1;
  int dp_rank = 0;
  // ZeRO: what this rank keeps only as its shard (the worker's data plugins decide), as a
  // range of each view (model/shard_views.h) of the parts laid one after the other; each
  // part keeps the pieces that fall in its own buffer (shard_of_part).
  model::ViewShards shard;
  // Tensor parallel: this rank's coordinate and the group (the worker sets the comm).
  model::TensorOptions tp;
  // Expert parallel: this rank's coordinate and the ep group (the worker sets the comm).
  model::ExpertOptions ep;
  // Context parallel: this rank's coordinate on the cp axis (the worker sets the comm). Its
  // micro-batches are the dp rank's whole sequences; the model picks its chunks of them.
  model::ContextOptions cp;
  // Pipeline parallel: the stages (chunks) this rank holds, one model part each, in chunk
  // order; empty = the whole model as one part. pp is the stage count, for the metrics.
  std::vector<model::StageOptions> stages;
  int pp = 1;
  // Throughput accounting: ranks in the job (0 = dp), model FLOPs per token (6N plus
  // attention, what MFU counts; the planner's formula) and the peak FLOP/s of one rank's
  // device (a hardware profile). MFU is reported when both are > 0. Default: 0
  int world = 0;
  double model_flops_per_token = 0;
  double peak_flops_per_rank = 0;
  // Set (by SIGTERM) to stop at the next step boundary; null = never. Every rank passes
  // its own flag to the hooks' reduce_loss, which makes it the group's decision. Read once
  // per step, at the gradient sync: a signal after that read stops at the end of the step
  // after, and one the last step reads ends the run normally (exit 0, saying so).
  const std::atomic<bool>* stop = nullptr;
};

// A piece of the model this rank trains, with its optimizer: the whole model, or one
// pipeline stage (chunk).
struct ModelPart {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<AdamW> opt;
  model::PartViews views;  // its tensors in the data plugins' views
  // Where its tensors start in each view of the parts (the data plugins'), per View.
  std::array<int64_t, model::kNumViews> view_offset{};
};

// The pieces of `shard` (a range of each view of the parts) that fall in a part whose views
// are `views`, starting at `view_offset` in the parts' views, as the part's flat ranges: the
// dense view's first, then the experts'. Empty when the shard misses the part. E.g. one view,
// shard [100, 250) on parts of 120 and 200 elements: part 0 keeps [100, 120), part 1 [0, 130).
model::ShardOptions shard_of_part(const model::ViewShards& shard, const model::PartViews& views,
                                  const std::array<int64_t, model::kNumViews>& view_offset);

class Trainer {
 public:
  // Opens the data, the device, builds and initialises (or loads) the model parts.
  static Result<std::unique_ptr<Trainer>> create(const RunOptions& options);
  ~Trainer();

  // The parallel layout's collectives (not owned; null for one rank).
  void set_hooks(StepHooks* hooks) { hooks_ = hooks; }
  StepHooks* hooks() const { return hooks_; }
  // What runs a step's micro-batches (not owned; null: one after the other).
  void set_micro_batches(MicroBatchRunner* runner) { runner_ = runner; }
  // Checkpoints after each step through `hook` (not owned; may be null).
  void set_save_hook(SaveHook* hook) { save_hook_ = hook; }

  // One optimizer step over global_batch sequences (this rank's slice of them).
  Result<StepMetrics> step();
  // Every step up to train.steps, with step lines, metrics.jsonl and --save.
  Status run();
  // The validation loss ([data] val_files): the mean cross-entropy over eval_batches global
  // batches of the held-out shards, the same on every rank and every layout.
  Result<double> evaluate();
  bool has_validation() const { return val_ != nullptr; }

  // Micro-batch k of the current step, read into the trainer's input buffers (valid until
  // the next call); its read time joins m->data_ms.
  Result<model::MicroBatch> read_micro_batch(int k, StepMetrics* m);
  // This rank's validation micro-batch j (0 .. eval_micro_batches()): global samples
  // (j*D + d)*b .. + b - 1 of the held-out shards, window = sample mod their windows,
  // in order; evaluation mode (no dropout). Valid until the next read.
  Result<model::MicroBatch> read_eval_batch(int j);
  int eval_micro_batches() const { return o_.data.eval_batches * accum_; }

  std::vector<ModelPart>& parts() { return parts_; }
  // The first part: the whole model unless this rank holds pipeline stages.
  model::Model& model() { return *parts_.front().model; }
  AdamW& optimizer() { return *parts_.front().opt; }
  Backend& backend() { return *backend_; }
  int grad_accum() const { return accum_; }
  const RunOptions& options() const { return o_; }
  uint64_t num_windows() const { return data_->num_windows(); }

  // Checkpoint/resume: optimizer steps done and tokens trained on. After the weights and
  // moments were restored, set_progress(step) makes run() continue at step + 1 with the
  // data, dropout and learning rate of that step (all functions of the step); the
  // checkpoint's `decay_steps` (0: none kept) fixes the schedule's length unless the job
  // sets [training] decay_steps (lr_schedule.h resolve_decay_steps).
  int64_t steps_done() const { return step_; }
  int64_t tokens() const { return tokens_; }
  void set_progress(int64_t steps_done, int64_t tokens, int64_t decay_steps = 0);
  // The learning-rate schedule's length this run trains with (what a checkpoint keeps).
  int64_t decay_steps() const { return o_.train.decay_steps; }

 private:
  Trainer() = default;
  Status create_parts();
  Result<float> clip_norm();
  Status device_status();
  Status open_validation();
  bool eval_due(int64_t step) const;
  void account(StepMetrics* m) const;
  void print_step(const StepMetrics& m, double eta_ms) const;
  void draw_progress(int64_t step, double eta_ms) const;

  RunOptions o_;  // o_.train.decay_steps resolved (> 0)
  int64_t job_decay_steps_ = 0;  // [training] decay_steps as the job gave it (0: unset)
  std::unique_ptr<Backend> backend_;
  std::vector<ModelPart> parts_;
  std::shared_ptr<data::TokenDataset> data_;
  std::shared_ptr<data::TokenDataset> val_;  // null: no [data] val_files
  std::unique_ptr<data::Sampler> sampler_;
  StepHooks* hooks_ = nullptr;
  MicroBatchRunner* runner_ = nullptr;
  std::unique_ptr<MicroBatchRunner> sequential_;
  SaveHook* save_hook_ = nullptr;
  int accum_ = 1;
  int64_t step_ = 0;  // optimizer steps done
  int64_t tokens_ = 0;
  bool stop_ = false;  // the last step's stop decision (the group's, through the hooks)
  std::vector<int32_t> inputs_, targets_;
};

// The default MicroBatchRunner: every micro-batch of the step through the one model part,
// forward then backward, the last backward reporting its blocks to the hooks as they finish.
class SequentialMicroBatches final : public MicroBatchRunner {
 public:
  Status run(Trainer& trainer, StepMetrics* m, double* loss, double* aux) override;
  Status evaluate(Trainer& trainer, int count, double* ce) override;
};

// What run() returns when a stop request (SIGTERM, SIGINT, SIGHUP, SIGUSR1) ended it at a
// step boundary after its checkpoint: kUnavailable (exit 75, requeue), but an orderly end
// that is logged as information, not as an error.
Status stopped_at(int64_t step);
bool is_stopped_at(const Status& s);

}  // namespace partrain::engine::train
