// See saver.h.
#include "store/saver.h"

#include <fmt/format.h>

#include "common/log.h"
#include "store/fault.h"

namespace partrain::store {
namespace {

namespace train = partrain::engine::train;
using Clock = std::chrono::steady_clock;
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

Status restore_trainer(train::Trainer& trainer, const std::string& root, const Checkpoint& c) {
  engine::model::Model& model = trainer.model();
  const auto& specs = model.table().specs();
  PARTRAIN_RETURN_IF_ERROR(check_complete(c.pieces, logical_tensors(model.table())));
  const size_t n = static_cast<size_t>(model.num_params());
  std::vector<float> host(n);
  engine::Backend& be = model.backend();
  const engine::Tensor targets[] = {model.params(), trainer.optimizer().exp_avg(),
                                    trainer.optimizer().exp_avg_sq()};
  for (size_t r = 0; r < 3; ++r) {
    for (const engine::model::ParamSpec& p : specs) {
      PARTRAIN_RETURN_IF_ERROR(read_range(root, c, p.name, kAllRoles[r], 0, p.numel(),
                                          host.data() + p.offset));
    }
    be.to_device(targets[r], host.data());
  }
  trainer.optimizer().reload_master();
  trainer.optimizer().set_steps_taken(c.state.adam_steps);
  trainer.set_progress(c.state.step, c.state.tokens);
  return Status::ok();
}

// This rank's pieces copied to host memory at a step boundary.
struct CheckpointSaver::Snapshot {
  TrainState state;
  std::vector<PieceSpec> specs;
  std::vector<std::vector<float>> data;
  uint64_t bytes = 0;
};

CheckpointSaver::CheckpointSaver(SaverOptions options, Committer* committer)
    : o_(std::move(options)), committer_(committer) {}

CheckpointSaver::~CheckpointSaver() { (void)wait(); }

Status CheckpointSaver::wait() {
  if (!thread_.joinable()) return Status::ok();
  thread_.join();
  return async_status_;
}

Status CheckpointSaver::write_and_commit(const Snapshot& s) {
  const auto t0 = Clock::now();
  std::vector<PieceData> views;
  for (size_t i = 0; i < s.specs.size(); ++i) views.push_back({s.specs[i], s.data[i].data()});
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

Status CheckpointSaver::after_step(train::Trainer& trainer, bool final, train::StepMetrics* m) {
  const int64_t step = trainer.steps_done();
  crash_point("after_step", step, o_.rank);
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
  const engine::TrainOptions& tr = trainer.options().train;
  TrainState& st = snap->state;
  st.step = step;
  st.consumed_samples = static_cast<uint64_t>(step) * static_cast<uint64_t>(tr.global_batch);
  st.epoch = st.consumed_samples / std::max<uint64_t>(1, trainer.num_windows());
  st.seed = tr.seed;
  st.adam_steps = trainer.optimizer().steps_taken();
  st.lr_step = step;
  st.loss_scale = 1.0;
  st.tokens = trainer.tokens();
  st.layout = o_.layout;
  st.world = o_.world;
  engine::model::Model& model = trainer.model();
  const std::vector<LogicalTensor> tensors = logical_tensors(model.table());
  snap->specs = dp_slice_pieces(tensors, o_.dp, o_.dp_rank);
  const engine::Tensor sources[] = {model.params(), trainer.optimizer().exp_avg(),
                                    trainer.optimizer().exp_avg_sq()};
  engine::Backend& be = model.backend();
  for (const PieceSpec& p : snap->specs) {
    const int idx = model.table().find(p.tensor);
    const int64_t offset = model.table().specs()[static_cast<size_t>(idx)].offset + p.begin;
    const engine::Tensor& src = sources[static_cast<size_t>(p.role)];
    std::vector<float> data(static_cast<size_t>(p.end - p.begin));
    be.to_host(data.data(), src.slice(offset, engine::Shape{p.end - p.begin}));
    snap->bytes += data.size() * sizeof(float);
    snap->data.push_back(std::move(data));
  }
  if (o_.async && !final) {
    m->save_mb_per_s = last_mb_per_s_;  // of the previous save: this one is still running
    thread_ = std::thread([this, snap] { async_status_ = write_and_commit(*snap); });
  } else {
    PARTRAIN_RETURN_IF_ERROR(write_and_commit(*snap));
    m->save_mb_per_s = last_mb_per_s_;
  }
  m->save_stall_ms = ms_since(t0);
  return Status::ok();
}

}  // namespace partrain::store
