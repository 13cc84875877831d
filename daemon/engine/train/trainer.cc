// The training loop. Read it top to bottom: create() sets everything up, step() is one
// optimizer step, run() is the loop with its metrics, step lines, saves and stop.
#include "engine/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/log.h"
#include "common/trace.h"
#include "common/units.h"
#include "engine/model/hf_io.h"
#include "engine/model/stage.h"
#include "engine/train/grad_norm.h"
#include "engine/train/lr_schedule.h"

namespace partrain::engine::train {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

Result<std::unique_ptr<Trainer>> Trainer::create(const RunOptions& options) {
  std::unique_ptr<Trainer> t(new Trainer());
  t->o_ = options;
  t->job_decay_steps_ = options.train.decay_steps;
  t->o_.train.decay_steps = resolve_decay_steps(options.train, 0);
  const TrainOptions& tr = options.train;
  // Global batch = micro_batch x grad_accum x dp.
  const int per_pass = tr.micro_batch * options.dp;
  if (tr.micro_batch < 1 || options.dp < 1 || tr.global_batch < 1 || tr.global_batch % per_pass != 0) {
    return Status::invalid(fmt::format(
        "[training] global_batch {} is not a multiple of micro_batch {} x dp {}; "
        "global_batch = micro_batch x grad_accum x dp", tr.global_batch, tr.micro_batch, options.dp));
  }
  t->accum_ = tr.global_batch / per_pass;
  // The data: memory-mapped shards and the seeded global order.
  Result<std::shared_ptr<data::TokenDataset>> ds =
      data::TokenDataset::open(options.data, options.model.vocab_size, options.model.seq_len);
  if (!ds) return ds.status();
  t->data_ = *ds;
  if (t->data_->num_windows() == 0) {
    return Status::invalid(fmt::format("[data] the shards hold {} tokens, fewer than one "
                                       "sequence of seq_len + 1 = {}", t->data_->num_tokens(),
                                       options.model.seq_len + 1));
  }
  t->sampler_ = std::make_unique<data::Sampler>(t->data_->num_windows(), tr.seed);
  PARTRAIN_RETURN_IF_ERROR(t->open_validation());
  // The device, the model parts (initialised from the seed, or loaded), their optimizers.
  Result<std::unique_ptr<Backend>> be = make_backend(options.device, options.precision);
  if (!be) return be.status();
  t->backend_ = std::move(be).value();
  PARTRAIN_RETURN_IF_ERROR(t->create_parts());
  const size_t n = static_cast<size_t>(tr.micro_batch) * options.model.seq_len;
  t->inputs_.resize(n);
  t->targets_.resize(n);
  t->sequential_ = std::make_unique<SequentialMicroBatches>();
  return t;
}

// The held-out shards, opened and checked as the training shards are.
Status Trainer::open_validation() {
  if (o_.data.val_files.empty()) return Status::ok();
  if (o_.data.eval_batches < 1 || o_.data.eval_every < 0) {
    return Status::invalid(fmt::format("[data] eval_batches {} / eval_every {}: eval_batches must be >= 1 "
                                       "and eval_every >= 0", o_.data.eval_batches, o_.data.eval_every));
  }
  DataOptions val;
  val.train_files = o_.data.val_files;
  val.format = o_.data.format;
  Result<std::shared_ptr<data::TokenDataset>> ds = data::TokenDataset::open(val, o_.model.vocab_size, o_.model.seq_len,
                                                                            "[data] val_files");
  if (!ds) return ds.status();
  if ((*ds)->num_windows() == 0) {
    return Status::invalid(fmt::format("[data] val_files hold {} tokens, fewer than one sequence of seq_len + 1 = {}",
                                       (*ds)->num_tokens(), o_.model.seq_len + 1));
  }
  val_ = *ds;
  return Status::ok();
}

Status Trainer::create_parts() {
  const std::vector<model::StageOptions> stages =
      o_.stages.empty() ? std::vector<model::StageOptions>{model::StageOptions{}} : o_.stages;
  std::array<int64_t, model::kNumViews> view_offset{};
  for (const model::StageOptions& stage : stages) {
    ModelPart part;
    part.view_offset = view_offset;
    part.views = model::PartViews(model::build_stage_table(o_.model, o_.tp, o_.ep, stage), o_.ep.size > 1);
    Result<std::unique_ptr<model::Model>> m =
        model::Model::create(o_.model, backend_.get(), o_.train.micro_batch, o_.train.seed,
                             shard_of_part(o_.shard, part.views, view_offset), o_.tp, o_.ep, stage, o_.cp);
    if (!m) return m.status();
    part.model = std::move(m).value();
    for (int v = 0; v < model::kNumViews; ++v) {
      view_offset[static_cast<size_t>(v)] += part.views.size(static_cast<model::View>(v));
    }
    Result<std::unique_ptr<AdamW>> opt = AdamW::create(part.model.get(), o_.train);
    if (!opt) return opt.status();
    part.opt = std::move(opt).value();
    parts_.push_back(std::move(part));
  }
  return Status::ok();
}

model::ShardOptions shard_of_part(const model::ViewShards& shard, const model::PartViews& views,
                                  const std::array<int64_t, model::kNumViews>& view_offset) {
  model::ShardOptions s;
  s.stage = shard.stage;
  s.prefetch = shard.prefetch;
  if (s.stage == 0) return s;
  for (int v = 0; v < model::kNumViews; ++v) {
    const size_t i = static_cast<size_t>(v);
    const model::FlatRange& r = shard.view[i];
    for (const model::FlatRange& f : views.flat_ranges(static_cast<model::View>(v), r.begin - view_offset[i],
                                                       r.end - view_offset[i])) {
      s.ranges.push_back(f);
    }
  }
  return s;
}

void Trainer::set_progress(int64_t steps_done, int64_t tokens, int64_t decay_steps) {
  step_ = steps_done;
  tokens_ = tokens;
  TrainOptions job = o_.train;
  job.decay_steps = job_decay_steps_;
  o_.train.decay_steps = resolve_decay_steps(job, decay_steps);
}

Trainer::~Trainer() {
  for (ModelPart& p : parts_) {
    p.opt.reset();  // frees its tensors while the backend is alive
    p.model.reset();
  }
}

Result<model::MicroBatch> Trainer::read_micro_batch(int k, StepMetrics* m) {
  // Micro-batch k of dp rank d reads step*G + (k*D + d)*mb ..: the union over the D ranks
  // is the one-rank batch, and each sample keeps its dropout stream.
  const TrainOptions& tr = o_.train;
  const uint64_t first = static_cast<uint64_t>(step_) * tr.global_batch +
                         (static_cast<uint64_t>(k) * o_.dp + o_.dp_rank) * tr.micro_batch;
  const auto t0 = Clock::now();
  {
    trace::Span span("data", trace::Lane::kCompute, k);
    PARTRAIN_RETURN_IF_ERROR(data::read_samples(*data_, *sampler_, first, tr.micro_batch, o_.model.seq_len,
                                                inputs_.data(), targets_.data()));
  }
  m->data_ms += ms_since(t0);
  return model::MicroBatch{inputs_.data(), targets_.data(), tr.micro_batch, first, step_};
}

Result<model::MicroBatch> Trainer::read_eval_batch(int j) {
  const int b = o_.train.micro_batch, T = o_.model.seq_len;
  const uint64_t first = (static_cast<uint64_t>(j) * o_.dp + o_.dp_rank) * b;
  for (int i = 0; i < b; ++i) {
    const size_t at = static_cast<size_t>(i) * T;
    PARTRAIN_RETURN_IF_ERROR(
        val_->read_window((first + i) % val_->num_windows(), inputs_.data() + at, targets_.data() + at));
  }
  model::MicroBatch batch{inputs_.data(), targets_.data(), b, first, step_};
  batch.train = false;
  return batch;
}

Status SequentialMicroBatches::run(Trainer& t, StepMetrics* m, double* loss, double* aux) {
  model::Model& model = t.model();
  Backend& be = t.backend();
  StepHooks* hooks = t.hooks();
  const int accum = t.grad_accum();
  for (int k = 0; k < accum; ++k) {
    Result<model::MicroBatch> read = t.read_micro_batch(k, m);
    if (!read) return read.status();
    const model::MicroBatch& batch = *read;
    auto t0 = Clock::now();
    std::optional<trace::Span> span(std::in_place, "forward", trace::Lane::kCompute, k);
    Result<model::LossParts> parts = model.forward(batch);
    if (!parts) return parts.status();
    be.synchronize();
    m->fwd_ms += ms_since(t0);
    span.emplace("backward", trace::Lane::kCompute, k);  // ends the forward span
    t0 = Clock::now();
    // On the last micro-batch each block's gradients are final when its backward ends:
    // the hooks may start syncing them under the rest of backward.
    Status hook_status;
    std::function<void(int)> block_done;
    if (hooks != nullptr && k == accum - 1) {
      block_done = [&](int l) {
        if (hook_status.is_ok()) hook_status = hooks->block_grads_ready(0, l);
      };
    }
    model.backward(1.0f / static_cast<float>(accum), block_done);
    PARTRAIN_RETURN_IF_ERROR(hook_status);
    be.synchronize();
    m->bwd_ms += ms_since(t0);
    *loss += parts->loss;
    *aux += parts->aux;
  }
  return hooks != nullptr ? hooks->part_grads_ready(0) : Status::ok();
}

Status SequentialMicroBatches::evaluate(Trainer& t, int count, double* ce) {
  for (int j = 0; j < count; ++j) {
    Result<model::MicroBatch> batch = t.read_eval_batch(j);
    if (!batch) return batch.status();
    Result<model::LossParts> parts = t.model().forward(*batch);
    if (!parts) return parts.status();
    *ce += parts->ce;
  }
  return Status::ok();
}

// A device fault (a failed CUDA or cuBLAS call, a kernel that faulted) stops the run at the
// step it happened in: retryable, as a lost node is (the job requeues and resumes from its
// last checkpoint), naming the call.
Status Trainer::device_status() {
  Status s = backend_->status();
  if (s) return s;
  return Status::unavailable(fmt::format("device {} failed at step {}: {}", backend_->name(), step_ + 1, s.message()));
}

// The clipping norm: this rank's squares of every part, summed over the groups that split
// the model (grad_norm.h).
Result<float> Trainer::clip_norm() {
  GradSquares local;
  for (ModelPart& p : parts_) {
    const GradSquares s = local_grad_squares(*p.model);
    local.dense += s.dense;
    local.experts += s.experts;
  }
  double total = local.dense + local.experts;
  if (hooks_ != nullptr) PARTRAIN_RETURN_IF_ERROR(hooks_->reduce_norm(local, &total));
  return static_cast<float>(std::sqrt(total));
}

Result<StepMetrics> Trainer::step() {
  const TrainOptions& tr = o_.train;
  StepMetrics m;
  const auto t_step = Clock::now();
  trace::begin_step(step_ + 1);
  // Gradients start at zero and accumulate over the micro-batches, each scaled by 1/m so
  // the result is the gradient of the mean loss over the global batch.
  if (hooks_ != nullptr) PARTRAIN_RETURN_IF_ERROR(hooks_->begin_step(step_));
  for (ModelPart& p : parts_) {
    p.model->zero_grads();
    p.model->reset_moe_stats();
  }
  double loss = 0.0, aux = 0.0;
  MicroBatchRunner& runner = runner_ != nullptr ? *runner_ : *sequential_;
  PARTRAIN_RETURN_IF_ERROR(runner.run(*this, &m, &loss, &aux));
  PARTRAIN_RETURN_IF_ERROR(device_status());  // before any rank syncs what a faulty device made
  loss /= accum_;
  // MoE: this rank's routing counts (each part counts its own blocks) and mean aux loss.
  if (o_.model.moe_experts > 0) {
    m.experts = o_.model.moe_experts;
    for (ModelPart& p : parts_) {
      const model::MoeStats& st = p.model->moe_stats();
      m.expert_tokens.resize(std::max(m.expert_tokens.size(), st.tokens.size()), 0);
      for (size_t i = 0; i < st.tokens.size(); ++i) m.expert_tokens[i] += st.tokens[i];
      m.dropped_tokens += st.dropped;
    }
    m.aux_loss = aux / accum_;
  }
  m.dp = o_.dp;
  m.tp = o_.tp.size;
  m.pp = o_.pp;
  m.ep = o_.ep.size;
  m.cp = o_.cp.size;
  // The layout's collectives make the gradients, loss, routing and stop flag the global
  // batch's and the group's.
  stop_ = o_.stop != nullptr && o_.stop->load();
  if (hooks_ != nullptr) {
    trace::Span span("wait for gradient sync");
    PARTRAIN_RETURN_IF_ERROR(hooks_->sync_grads(&m));
    PARTRAIN_RETURN_IF_ERROR(hooks_->reduce_loss(&loss, &stop_));
  }
  // Clip by the global norm and take one AdamW step per part at this step's learning rate,
  // once an asynchronous save has copied the state the step is about to change.
  if (save_hook_ != nullptr) PARTRAIN_RETURN_IF_ERROR(save_hook_->before_update(&m));
  const auto t_opt = Clock::now();
  m.lr = lr_at(tr, step_);
  Result<float> norm = clip_norm();
  if (!norm) return norm.status();
  {
    trace::Span span("optimizer");
    for (ModelPart& p : parts_) p.opt->step(m.lr, *norm);
    if (hooks_ != nullptr) PARTRAIN_RETURN_IF_ERROR(hooks_->after_step(&m));
    backend_->synchronize();
  }
  m.opt_ms = ms_since(t_opt);
  PARTRAIN_RETURN_IF_ERROR(device_status());
  ++step_;
  tokens_ += static_cast<int64_t>(tr.global_batch) * o_.model.seq_len;
  m.step = step_;
  m.loss = loss;
  m.grad_norm = *norm;
  m.tokens = tokens_;
  m.step_ms = ms_since(t_step);
  m.time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  account(&m);
  if (!std::isfinite(m.loss)) {
    return Status::internal(fmt::format("step {}: loss is {}; lower [training] lr or raise "
                                        "warmup_steps", m.step, m.loss));
  }
  return m;
}

// Every micro-batch has b sequences of T tokens, so the mean of their mean cross-entropies is
// the mean over every validation token; the hooks make it the global one (the head's stage,
// the mean over dp) exactly as for the training loss.
Result<double> Trainer::evaluate() {
  if (val_ == nullptr) return Status::internal("evaluate() without [data] val_files");
  trace::Span span("evaluate");
  MicroBatchRunner& runner = runner_ != nullptr ? *runner_ : *sequential_;
  double ce = 0.0;
  PARTRAIN_RETURN_IF_ERROR(runner.evaluate(*this, eval_micro_batches(), &ce));
  backend_->synchronize();
  PARTRAIN_RETURN_IF_ERROR(device_status());
  ce /= eval_micro_batches();
  bool stop = false;  // every rank passes false: only the loss is reduced
  if (hooks_ != nullptr) PARTRAIN_RETURN_IF_ERROR(hooks_->reduce_loss(&ce, &stop));
  return ce;
}

bool Trainer::eval_due(int64_t step) const {
  if (val_ == nullptr) return false;
  return step == o_.train.steps || (o_.data.eval_every > 0 && step % o_.data.eval_every == 0);
}

// Throughput: the global batch's tokens over the step; MFU against every rank's peak.
void Trainer::account(StepMetrics* m) const {
  const int world = o_.world > 0 ? o_.world : o_.dp;
  const double step_tokens = static_cast<double>(o_.train.global_batch) * o_.model.seq_len;
  m->tokens_per_s = m->step_ms > 0 ? step_tokens / (m->step_ms / 1e3) : 0;
  m->tokens_per_s_per_rank = m->tokens_per_s / world;
  if (o_.model_flops_per_token > 0 && o_.peak_flops_per_rank > 0) {
    m->mfu = m->tokens_per_s * o_.model_flops_per_token / (o_.peak_flops_per_rank * world);
  }
  m->peak_bytes = backend_->memory().peak;
}

// "step    50/100 | loss 2.345678 | val 2.401234 | lr 1.000e-03 | norm 0.4321 | 10.8K tok/s |
// 24.3 ms | MFU 40.1% | ETA 1.2 min", then the step's parallel summary; on a terminal the
// progress bar stays below the lines (log::set_status_line).
void Trainer::print_step(const StepMetrics& m, double eta_ms) const {
  std::string line = fmt::format("step {:>5}/{} | loss {:.6f}", m.step, o_.train.steps, m.loss);
  if (m.val_loss >= 0) line += fmt::format(" | val {:.6f}", m.val_loss);
  line += fmt::format(" | lr {:.3e} | norm {:.4f} | {} tok/s | {}", m.lr, m.grad_norm, human_count(m.tokens_per_s),
                      human_ms(m.step_ms));
  if (m.mfu > 0) line += fmt::format(" | MFU {:.1f}%", 100 * m.mfu);
  if (eta_ms > 0) line += " | ETA " + human_ms(eta_ms);
  log::print_line(line + step_summary(m));
}

// The progress bar: "[#########.....................] 30/100 steps, ETA 1.2 min".
void Trainer::draw_progress(int64_t step, double eta_ms) const {
  constexpr int kWidth = 30;
  const int64_t steps = std::max<int64_t>(1, o_.train.steps);
  const auto done = static_cast<size_t>(kWidth * std::min(step, steps) / steps);
  std::string bar = fmt::format("[{}{}] {}/{} steps", std::string(done, '#'), std::string(kWidth - done, '.'),
                                step, o_.train.steps);
  if (eta_ms > 0) bar += ", ETA " + human_ms(eta_ms);
  log::set_status_line(bar);
}

Status Trainer::run() {
  const TrainOptions& tr = o_.train;
  std::unique_ptr<RunFolderLock> run_folder_lock;  // while this run writes the folder's metrics
  std::ofstream metrics;
  if (!o_.run_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o_.run_dir, ec);
    if (ec) return Status::io_error(o_.run_dir + ": cannot create the run folder: " + ec.message());
    Result<std::unique_ptr<RunFolderLock>> lock = RunFolderLock::take(o_.run_dir);
    if (!lock) return lock.status();
    run_folder_lock = std::move(lock).value();
    PARTRAIN_RETURN_IF_ERROR(open_metrics(o_.run_dir + "/metrics.jsonl", step_, &metrics));
  }
  // TensorBoard's event files beside it (`tensorboard --logdir RUN_DIR/tb`); a new file per
  // start, as TensorBoard expects of a resumed run.
  std::unique_ptr<metrics::TbWriter> tb;
  if (!o_.run_dir.empty()) {
    Result<std::unique_ptr<metrics::TbWriter>> w = metrics::TbWriter::open(o_.run_dir + "/tb");
    if (!w) return w.status();
    tb = std::move(w).value();
  }
  int64_t params = 0;
  for (const ModelPart& p : parts_) params += p.model->num_params();
  log::info("engine", "{}: {} parameters{}, {} on {}, global batch {} = {} x {} micro-batches x dp {}, {} tokens "
            "in {} sequences{}", o_.name, human_count(static_cast<double>(params)),
            o_.stages.empty() ? "" : " on this rank's stages", o_.model.arch == Arch::kGpt2 ? "gpt2" : "llama",
            backend_->name(), tr.global_batch, tr.micro_batch, accum_, o_.dp,
            human_count(static_cast<double>(data_->num_tokens())), human_count(static_cast<double>(data_->num_windows())),
            val_ ? fmt::format("; validation on {} tokens {}", human_count(static_cast<double>(val_->num_tokens())),
                               o_.data.eval_every > 0 ? fmt::format("every {} steps", o_.data.eval_every)
                                                      : std::string("after the last step"))
                 : std::string());
  // The ETA: the steps left at this run's mean step time so far (checkpoints and
  // evaluations included).
  const int64_t first_step = step_;
  const auto t_run = Clock::now();
  const bool show_progress = o_.progress_bar && !o_.quiet;
  if (show_progress) draw_progress(step_, 0);
  struct EraseBar {  // however the loop ends
    bool on;
    ~EraseBar() { if (on) log::set_status_line(""); }
  } erase_bar{show_progress};
  for (int64_t s = step_; s < tr.steps; ++s) {
    log::set_step(s + 1);
    Result<StepMetrics> m = step();
    if (!m) return m.status();
    // stop_ is the group's decision (reduce_loss), the same on every rank.
    const bool final = stop_ || m->step == tr.steps;
    if (stop_ && m->step == tr.steps) {  // scancel in the last step: the end is its stop checkpoint
      log::info("engine", "stop requested during the last step: the run ends normally at step {}", m->step);
    }
    if (save_hook_ != nullptr && metrics.is_open()) {
      PARTRAIN_RETURN_IF_ERROR(write_pending_metrics(o_.run_dir + "/metrics.jsonl", metrics_json(*m)));
    }
    if (save_hook_ != nullptr) PARTRAIN_RETURN_IF_ERROR(save_hook_->after_step(*this, final, &*m));
    // After the checkpoint, and not when stopping: a preempted job's grace time is for saving.
    const bool stopping_early = stop_ && m->step < tr.steps;
    if (eval_due(m->step) && !stopping_early) {
      Result<double> val = evaluate();
      if (!val) return val.status();
      m->val_loss = *val;
    }
    trace::end_step(m->step);  // after the save, so a traced step shows its checkpoint I/O
    if (metrics.is_open()) {
      PARTRAIN_RETURN_IF_ERROR(append_metrics(metrics, o_.run_dir + "/metrics.jsonl", metrics_json(*m)));
      if (save_hook_ != nullptr) drop_pending_metrics(o_.run_dir + "/metrics.jsonl");
    }
    if (tb) PARTRAIN_RETURN_IF_ERROR(write_tensorboard(*tb, *m));
    const double eta_ms = ms_since(t_run) / static_cast<double>(m->step - first_step) *
                          static_cast<double>(tr.steps - m->step);
    if (show_progress) draw_progress(m->step, eta_ms);
    if (!o_.quiet && (m->step % std::max(1, tr.log_every) == 0 || m->step == tr.steps || m->val_loss >= 0)) {
      print_step(*m, eta_ms);
    }
    if (stopping_early) {
      return stopped_at(m->step);
    }
  }
  if (Status s = trace::flush(); !s) log::warn("engine", "{}", s.message());
  // Peak device memory per category, for comparison with the planner's estimate.
  const MemoryStats& mem = backend_->memory();
  std::string peaks;
  for (int c = 0; c < kNumMemCategories; ++c) {
    peaks += fmt::format("{} {:.2f} MiB, ", mem_category_name(static_cast<MemCategory>(c)),
                         static_cast<double>(mem.peak[static_cast<size_t>(c)]) / (1 << 20));
  }
  log::info("engine", "peak memory: {}total {:.2f} MiB", peaks, static_cast<double>(mem.peak_total) / (1 << 20));
  if (!o_.save_path.empty()) {
    PARTRAIN_RETURN_IF_ERROR(model::save_hf(model(), o_.save_path));
    log::info("engine", "weights written to {} (Hugging Face names)", o_.save_path);
  }
  return Status::ok();
}

namespace {
constexpr const char* kStoppedAt = "stopped at step ";
}  // namespace

Status stopped_at(int64_t step) {
  return Status::unavailable(fmt::format("{}{} by a stop request, after its checkpoint; the next start resumes there",
                                         kStoppedAt, step));
}

bool is_stopped_at(const Status& s) {
  return s.code() == StatusCode::kUnavailable && s.message().rfind(kStoppedAt, 0) == 0;
}

}  // namespace partrain::engine::train
