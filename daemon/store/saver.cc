// See saver.h.
#include "store/saver.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>

#include <fmt/format.h>

#include "common/log.h"
#include "common/trace.h"
#include "engine/model/hf_io.h"
#include "store/fault.h"

namespace partrain::store {
namespace {

namespace train = partrain::engine::train;
using Clock = std::chrono::steady_clock;
// Called first on a background save's thread: nice 10, so on a rank whose compute threads fill
// the cores it runs in their gaps (the next save is several steps away), elsewhere at full
// speed. The step is what a user waits for.
void yield_to_compute() { (void)setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10); }
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

std::vector<LogicalTensor> logical_tensors(const engine::model::ParamTable& table) {
  std::vector<LogicalTensor> out;
  for (const engine::model::ParamSpec& p : table.specs()) {
    out.push_back({p.name, std::vector<int64_t>(p.shape.dims.begin(), p.shape.dims.begin() + p.shape.ndim)});
  }
  return out;
}

namespace {

// The device tensor of `role` (the flat parameter, first- or second-moment buffer).
engine::Tensor flat_of(engine::model::Model& model, train::AdamW& opt, Role role) {
  switch (role) {
    case Role::kWeight:  // fp32: the master copy where the device keeps bf16 weights
      return opt.master().empty() ? model.params() : opt.master();
    case Role::kAdamM: return opt.exp_avg();
    case Role::kAdamV: return opt.exp_avg_sq();
  }
  return {};
}

// Views of `specs` into the part's flat buffers.
std::vector<PieceView> views_of(engine::model::Model& model, train::AdamW& opt, const std::vector<PieceSpec>& specs) {
  const engine::model::ParamTable& table = model.table();
  std::vector<PieceView> out;
  for (const PieceSpec& p : specs) {
    const int64_t at = table.specs()[static_cast<size_t>(table.find(p.tensor))].offset + p.begin;
    out.push_back({p, flat_of(model, opt, p.role).slice(at, engine::Shape{p.end - p.begin})});
  }
  return out;
}

// The logical pieces of flat range [lo, hi) of `role`, viewing `flat` (a tensor holding the
// flat buffer's elements from `base` on: the whole buffer, or a ZeRO shard). Tensors held
// whole on every tp rank are left out unless `replicated`.
void append_range_views(const engine::model::ParamTable& table, Role role, const engine::Tensor& flat,
                        int64_t base, int64_t lo, int64_t hi, bool replicated, std::vector<PieceView>* out) {
  for (const engine::model::ShardPiece& p : engine::model::shard_pieces(table, lo, hi)) {
    if (!replicated && !table.specs()[static_cast<size_t>(table.find(p.name))].split()) continue;
    PieceSpec spec{p.name, std::vector<int64_t>(p.shape.dims.begin(), p.shape.dims.begin() + p.shape.ndim),
                   role, p.begin, p.end};
    out->push_back({spec, flat.slice(p.flat_offset - base, engine::Shape{p.end - p.begin})});
  }
}

// The logical pieces the flat range [lo, hi) of the part's buffers holds, for every role
// (the weights, fp32 master where kept, and the two moments).
std::vector<PieceView> range_views(engine::model::Model& model, train::AdamW& opt, int64_t lo, int64_t hi,
                                   bool replicated) {
  std::vector<PieceView> out;
  for (Role role : kAllRoles) {
    append_range_views(model.table(), role, flat_of(model, opt, role), 0, lo, hi, replicated, &out);
  }
  return out;
}

// Everything the part holds, for a restore.
std::vector<PieceView> all_views(engine::model::Model& model, train::AdamW& opt) {
  return views_of(model, opt, dp_slice_pieces(logical_tensors(model.table()), 1, 0));
}

}  // namespace

std::vector<PieceView> StateLayout::save_views(train::Trainer& trainer) {
  std::vector<PieceView> out;
  for (train::ModelPart& part : trainer.parts()) {
    const bool tied_copy = part.model->holds_tied_head_copy();
    for (PieceView& v : save_part(*part.model, *part.opt)) {
      if (tied_copy && v.spec.tensor == part.model->tied_embedding_name()) continue;  // the first stage writes it
      out.push_back(std::move(v));
    }
  }
  return out;
}

std::vector<PieceView> StateLayout::restore_views(train::Trainer& trainer) {
  std::vector<PieceView> out;
  for (train::ModelPart& part : trainer.parts()) {
    for (PieceView& v : restore_part(*part.model, *part.opt)) out.push_back(std::move(v));
  }
  return out;
}

std::vector<PieceView> ReplicatedDpLayout::save_part(engine::model::Model& model, train::AdamW& opt) {
  return views_of(model, opt, dp_slice_pieces(logical_tensors(model.table()), dp_, dp_rank_));
}

std::vector<PieceView> ReplicatedDpLayout::restore_part(engine::model::Model& model, train::AdamW& opt) {
  return all_views(model, opt);
}

std::vector<PieceView> ZeroStateLayout::save_part(engine::model::Model& m, train::AdamW& opt) {
  const bool replicated = tp_rank_ == 0;
  std::vector<PieceView> out;
  for (const engine::model::ShardOptions::Run& r : m.shard_runs()) {
    const int64_t n = r.end - r.begin;
    append_range_views(m.table(), Role::kWeight, m.shard_params(r), r.begin, r.begin, r.end, replicated, &out);
    append_range_views(m.table(), Role::kAdamM, opt.exp_avg().slice(r.at, engine::Shape{n}), r.begin, r.begin, r.end,
                       replicated, &out);
    append_range_views(m.table(), Role::kAdamV, opt.exp_avg_sq().slice(r.at, engine::Shape{n}), r.begin, r.begin,
                       r.end, replicated, &out);
  }
  return out;
}

std::vector<PieceView> ZeroStateLayout::restore_part(engine::model::Model& m, train::AdamW& opt) {
  std::vector<PieceView> out;
  if (stage_ < 3) {  // the replicated weights, whole (the shard lives in them)
    append_range_views(m.table(), Role::kWeight, m.params(), 0, 0, m.num_params(), true, &out);
  }
  for (const engine::model::ShardOptions::Run& r : m.shard_runs()) {
    const int64_t n = r.end - r.begin;
    if (stage_ >= 3) append_range_views(m.table(), Role::kWeight, m.shard_params(r), r.begin, r.begin, r.end, true, &out);
    append_range_views(m.table(), Role::kAdamM, opt.exp_avg().slice(r.at, engine::Shape{n}), r.begin, r.begin, r.end,
                       true, &out);
    append_range_views(m.table(), Role::kAdamV, opt.exp_avg_sq().slice(r.at, engine::Shape{n}), r.begin, r.begin,
                       r.end, true, &out);
  }
  return out;
}

std::vector<PieceView> FlatSliceLayout::save_part(engine::model::Model& model, train::AdamW& opt) {
  const int64_t n = model.num_params();
  return range_views(model, opt, n * dp_rank_ / dp_, n * (dp_rank_ + 1) / dp_, tp_rank_ == 0);
}

std::vector<PieceView> FlatSliceLayout::restore_part(engine::model::Model& model, train::AdamW& opt) {
  return range_views(model, opt, 0, model.num_params(), true);
}

std::vector<PieceView> ExpertParallelLayout::save_part(engine::model::Model& model, train::AdamW& opt) {
  // Each tensor's slice as local flat elements [n d / D, n (d + 1) / D) of (D, d) = (dp,
  // dp rank) for the replicated tensors, (expert_dp, its rank) for the experts, written as
  // logical pieces; tensors every tp rank holds whole (experts too) only from tp rank 0.
  std::vector<PieceView> out;
  for (Role role : kAllRoles) {
    const engine::Tensor flat = flat_of(model, opt, role);
    for (const engine::model::ParamSpec& p : model.table().specs()) {
      const int64_t n = p.numel(), D = p.expert ? expert_dp_ : dp_, d = p.expert ? expert_dp_rank_ : dp_rank_;
      const int64_t lo = p.offset + n * d / D, hi = p.offset + n * (d + 1) / D;
      if (lo < hi) append_range_views(model.table(), role, flat, 0, lo, hi, tp_rank_ == 0, &out);
    }
  }
  return out;
}

std::vector<PieceView> ExpertParallelLayout::restore_part(engine::model::Model& model, train::AdamW& opt) {
  return range_views(model, opt, 0, model.num_params(), true);
}

namespace {

// Fills the views of `layout` (plain dp when null) whose role `wanted` accepts, each from
// `read`, then makes each part's weights and fp32 master copy agree.
Status fill_views(train::Trainer& trainer, StateLayout* layout, const std::function<bool(Role)>& wanted,
                  const std::function<Status(const PieceSpec&, float*)>& read) {
  ReplicatedDpLayout replicated(1, 0);
  StateLayout* l = layout != nullptr ? layout : &replicated;
  engine::Backend& be = trainer.backend();
  std::vector<float> host;
  for (const PieceView& v : l->restore_views(trainer)) {
    if (!wanted(v.spec.role)) continue;
    host.resize(static_cast<size_t>(v.spec.end - v.spec.begin));
    PARTRAIN_RETURN_IF_ERROR(read(v.spec, host.data()));
    be.to_device(v.tensor, host.data());
  }
  be.synchronize();
  for (train::ModelPart& part : trainer.parts()) {
    const engine::Tensor& master = part.opt->master();
    if (!master.empty() && master.numel() == part.model->params().numel()) {
      // The fp32 master weights came back: the device's bf16 weights are their rounding.
      host.resize(static_cast<size_t>(master.numel()));
      be.to_host(host.data(), master);
      be.to_device(part.model->params(), host.data());
    } else {
      part.opt->reload_master();
    }
  }
  return Status::ok();
}

}  // namespace

Status init_from_hf(train::Trainer& trainer, const std::string& path, StateLayout* layout) {
  Result<engine::model::HfWeights> weights = engine::model::HfWeights::open(path);
  if (!weights) return weights.status();
  std::map<std::string, bool> transposed;  // by logical name, from any part's table
  for (train::ModelPart& part : trainer.parts()) {
    for (const engine::model::ParamSpec& p : part.model->table().specs()) transposed[p.name] = p.hf_transposed;
  }
  return fill_views(trainer, layout, [](Role r) { return r == Role::kWeight; },
                    [&](const PieceSpec& s, float* out) {
                      return engine::model::read_hf_range(*weights, s.tensor, s.shape, transposed[s.tensor], s.begin,
                                                          s.end, out);
                    });
}

Status restore_trainer(train::Trainer& trainer, const std::string& root, const Checkpoint& c, StateLayout* layout,
                       bool announce) {
  PARTRAIN_RETURN_IF_ERROR(fill_views(trainer, layout, [](Role) { return true; }, [&](const PieceSpec& s, float* out) {
    return read_range(root, c, s.tensor, s.role, s.begin, s.end, out);
  }));
  for (train::ModelPart& part : trainer.parts()) part.opt->set_steps_taken(c.state.adam_steps);
  trainer.set_progress(c.state.step, c.state.tokens, c.state.decay_steps);
  if (announce) {
    log::info("store", "resuming at step {} from {}/{} (written by {}, sample {}, epoch {})", c.state.step, root,
              step_folder(c.state.step), c.state.layout.empty() ? "one rank" : c.state.layout,
              c.state.consumed_samples, c.state.epoch);
    if (c.state.decay_steps > 0 && c.state.decay_steps != trainer.decay_steps()) {
      log::warn("store", "learning-rate schedule of {} steps ([training] decay_steps), not the {} the run started "
                "with: the learning rate changes from this step on", trainer.decay_steps(), c.state.decay_steps);
    }
    if (c.state.step >= trainer.options().train.steps) {
      log::warn("store", "the checkpoint of step {} already reaches [training] steps = {}: nothing to train; "
                "give --steps N above {} to train on, or remove {} to start over", c.state.step,
                trainer.options().train.steps, c.state.step, root);
    }
  }
  return Status::ok();
}

// This rank's pieces copied to host memory at a step boundary: piece i's elements are
// staging[offsets[i], offsets[i] + its length).
struct CheckpointSaver::Snapshot {
  TrainState state;
  std::vector<PieceSpec> specs;
  std::vector<size_t> offsets;
  uint64_t bytes = 0;
};

CheckpointSaver::CheckpointSaver(SaverOptions options, Committer* committer)
    : o_(std::move(options)), committer_(committer) {}

CheckpointSaver::~CheckpointSaver() { (void)wait(); }

Status CheckpointSaver::before_update(train::StepMetrics* m) {
  std::unique_lock<std::mutex> lock(copy_mu_);
  if (!copy_pending_) return Status::ok();
  const auto t0 = Clock::now();
  copy_done_.wait(lock, [this] { return !copy_pending_; });
  m->save_wait_ms = ms_since(t0);
  return Status::ok();
}

Status CheckpointSaver::wait() {
  if (!thread_.joinable()) return Status::ok();
  thread_.join();
  return async_status_;
}

Status CheckpointSaver::write_and_commit(const Snapshot& s) {
  trace::Span span("checkpoint write and commit", trace::Lane::kIo);
  if (fault_armed("slow_write", s.state.step, o_.rank)) std::this_thread::sleep_for(std::chrono::seconds(1));
  const auto t0 = Clock::now();
  std::vector<PieceData> views;
  for (size_t i = 0; i < s.specs.size(); ++i) views.push_back({s.specs[i], staging_.data() + s.offsets[i]});
  Result<std::vector<PieceRecord>> records = write_shard(o_.root, s.state.step, o_.rank, views);
  if (!records) return records.status();
  const double write_ms = ms_since(t0);
  last_mb_per_s_ = write_ms > 0 ? static_cast<double>(s.bytes) / (1 << 20) / (write_ms / 1e3) : 0;
  PARTRAIN_RETURN_IF_ERROR(committer_->commit(s.state, o_.rank, std::move(records).value()));
  if (o_.rank == 0) {
    log::info("store", "checkpoint of step {}: shard of {:.2f} MiB written in {:.1f} ms ({:.1f} MB/s), "
              "committed after {:.1f} ms", s.state.step, static_cast<double>(s.bytes) / (1 << 20),
              write_ms, last_mb_per_s_, ms_since(t0));
  }
  return Status::ok();
}

// A CPU rank's state: copied on the save's thread while the next step's forward and backward
// run (they only read it); that step's update waits for the copy (before_update), then
// training and the write go on side by side.
void CheckpointSaver::copy_and_write_in_background(std::shared_ptr<Snapshot> snap, const std::vector<PieceView>& views) {
  std::vector<const float*> sources;
  for (const PieceView& v : views) sources.push_back(static_cast<const float*>(v.tensor.data));
  copy_pending_ = true;
  // Begun here, so a trace shows the copy under the step that saved (--trace); it ends when
  // the background copy does.
  auto copy_span = std::make_shared<trace::Span>("checkpoint copy to host", trace::Lane::kIo);
  thread_ = std::thread([this, snap, sources = std::move(sources), copy_span]() mutable {
    yield_to_compute();
    if (fault_armed("slow_snapshot", snap->state.step, o_.rank)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    for (size_t i = 0; i < sources.size(); ++i) {
      const PieceSpec& spec = snap->specs[i];
      std::memcpy(staging_.data() + snap->offsets[i], sources[i],
                  static_cast<size_t>(spec.end - spec.begin) * sizeof(float));
    }
    copy_span.reset();
    {
      std::lock_guard<std::mutex> lock(copy_mu_);
      copy_pending_ = false;
    }
    copy_done_.notify_all();
    async_status_ = write_and_commit(*snap);
  });
}

Status CheckpointSaver::after_step(train::Trainer& trainer, bool final, train::StepMetrics* m) {
  ReplicatedDpLayout replicated(o_.dp, o_.dp_rank);
  StateLayout* layout = o_.layout != nullptr ? o_.layout : &replicated;
  const engine::TrainOptions& tr = trainer.options().train;
  engine::Backend& be = trainer.backend();
  const int64_t step = trainer.steps_done();
  if (fault_armed("after_step", step, o_.rank)) {
    // A kill between saves: the save in flight (of an earlier step) ends first, so the test
    // knows which checkpoint is the newest committed however slowly a loaded machine wrote
    // it. Kills inside a save are the shard_write, before_commit and after_commit points.
    (void)wait();
    kill_at("after_step", step, o_.rank);
  }
  exit_zero_point(step, o_.rank);
  const bool due = final || (o_.every > 0 && step % o_.every == 0);
  if (!due) return Status::ok();
  const auto t0 = Clock::now();
  // The previous save first: saves never overlap.
  const bool pending = thread_.joinable();
  PARTRAIN_RETURN_IF_ERROR(wait());
  if (pending && o_.rank == 0) {
    log::info("store", "checkpoint of step {}: waited {:.1f} ms for the previous save to finish", step, ms_since(t0));
  }
  // Copy this rank's slices of the weights and moments to host memory.
  auto snap = std::make_shared<Snapshot>();
  TrainState& st = snap->state;
  st.step = step;
  st.consumed_samples = static_cast<uint64_t>(step) * static_cast<uint64_t>(tr.global_batch);
  st.epoch = st.consumed_samples / std::max<uint64_t>(1, trainer.num_windows());
  st.seed = tr.seed;
  st.adam_steps = trainer.optimizer().steps_taken();
  st.lr_step = step;
  st.decay_steps = trainer.decay_steps();
  st.loss_scale = 1.0;
  st.tokens = trainer.tokens();
  st.layout = o_.layout_name;
  st.world = o_.world;
  // Into the staging buffer the previous save (finished above) used: after the first save
  // the copy touches no new page.
  const std::vector<PieceView> views = layout->save_views(trainer);
  size_t total = 0;
  bool host_readable = true;
  for (const PieceView& v : views) {
    snap->offsets.push_back(total);
    snap->specs.push_back(v.spec);
    total += static_cast<size_t>(v.spec.end - v.spec.begin);
    host_readable = host_readable && be.host_readable(v.tensor);
  }
  staging_.reserve(total, be);
  snap->bytes = total * sizeof(float);
  if (o_.async && !final && host_readable) {
    m->save_mb_per_s = last_mb_per_s_ > 0 ? last_mb_per_s_ : -1;
    copy_and_write_in_background(snap, views);
    m->save_stall_ms = ms_since(t0);
    return Status::ok();
  }
  {
    trace::Span span("checkpoint copy to host", trace::Lane::kIo);
    for (size_t i = 0; i < views.size(); ++i) be.to_host(staging_.data() + snap->offsets[i], views[i].tensor);
  }
  if (o_.async && !final) {
    // Of the previous save: this one is still running (-1: none has finished yet).
    m->save_mb_per_s = last_mb_per_s_ > 0 ? last_mb_per_s_ : -1;
    thread_ = std::thread([this, snap] {
      yield_to_compute();
      async_status_ = write_and_commit(*snap);
    });
  } else {
    PARTRAIN_RETURN_IF_ERROR(write_and_commit(*snap));
    m->save_mb_per_s = last_mb_per_s_;
  }
  m->save_stall_ms = ms_since(t0);
  return Status::ok();
}

}  // namespace partrain::store
