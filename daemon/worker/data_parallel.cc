// See data_parallel.h. The step is the single-rank trainer's (engine/train/trainer.cc):
// this file adds the gradient sync through the data plugin and the loss/stop exchange.
#include "worker/data_parallel.h"

#include <memory>
#include <vector>

#include <fmt/format.h>

#include "engine/backend.h"
#include "engine/model/model.h"
#include "engine/train/trainer.h"
#include "common/log.h"
#include "store/shard_file.h"
#include "worker/comm_adapter.h"

namespace partrain::worker {
namespace {

namespace engine = partrain::engine;
// A plugin call's error as a Status.
Status plugin_status(int rc, const char* err, const std::string& what) {
  if (rc == PARTRAIN_OK) return Status::ok();
  const std::string msg = fmt::format("data plugin {}: {}", what, err);
  if (rc == PARTRAIN_EINVAL) return Status::invalid(msg);
  if (rc == PARTRAIN_EUNAVAIL) return Status::unavailable(msg);
  return Status::internal(msg);
}

// The plugin instance, finalized on every path.
struct PluginInstance {
  const partrain_strategy_v1_t* api = nullptr;
  void* state = nullptr;
  ~PluginInstance() {
    if (api != nullptr && state != nullptr) api->finalize(state);
  }
};

// The trainer's hooks for a dp rank: gradients through the data plugin, the loss and the
// stop flag through one small all-reduce on the dp group.
class DataParallelHooks final : public engine::train::StepHooks {
 public:
  DataParallelHooks(const DataParallelRun& run, PluginInstance* plugin)
      : run_(run), plugin_(plugin) {}

  Status begin_step(int64_t step) override {
    if (plugin_->state == nullptr || run_.plugin->step_begin == nullptr) return Status::ok();
    return plugin_status(run_.plugin->step_begin(plugin_->state, step, err_, sizeof err_), err_,
                         "step_begin");
  }

  // A block's gradients are final: hand its range over now, so the plugin's buckets are
  // all-reduced while the blocks below are still in backward.
  Status block_grads_ready(engine::model::Model& m, int layer) override {
    if (plugin_->state == nullptr) return Status::ok();
    const auto [lo, hi] = m.block_param_range(layer);
    if (handed_.empty()) handed_.assign(m.table().specs().size(), false);
    const auto& specs = m.table().specs();
    for (size_t i = specs.size(); i-- > 0;) {
      if (specs[i].offset >= lo && specs[i].offset < hi) {
        PARTRAIN_RETURN_IF_ERROR(hand_over(m, i));
      }
    }
    return Status::ok();
  }

  // Backward is done: hand over what no block did (embeddings, final norm, head), back to
  // front, then wait for every bucket.
  Status sync_grads(engine::model::Model& m, engine::train::StepMetrics* sm) override {
    if (plugin_->state == nullptr) return Status::ok();
    float* g = m.grads().ptr<float>();
    if (handed_.empty()) handed_.assign(m.table().specs().size(), false);
    for (size_t i = handed_.size(); i-- > 0;) {
      if (!handed_[i]) PARTRAIN_RETURN_IF_ERROR(hand_over(m, i));
    }
    handed_.assign(handed_.size(), false);  // the next step starts over
    partrain_sync_stats_v1_t stats{};
    PARTRAIN_RETURN_IF_ERROR(plugin_status(
        run_.plugin->grads_done(plugin_->state, g, &stats, err_, sizeof err_), err_, "grads_done"));
    sm->comm_ms = stats.comm_ms;
    sm->exposed_ms = stats.exposed_ms;
    sm->collectives = static_cast<int>(stats.collectives);
    return Status::ok();
  }

  // One 2-float all-reduce: the batch's mean loss and whether any rank was asked to stop.
  Status reduce_loss(double* loss) override {
    float shared[2] = {static_cast<float>(*loss), run_.stop->load() ? 1.0f : 0.0f};
    if (run_.dp_comm == nullptr) return Status::ok();  // one rank: its loss, exactly
    PARTRAIN_RETURN_IF_ERROR(run_.dp_comm->all_reduce(shared, 2, comm::ReduceOp::kSum)->wait());
    *loss = static_cast<double>(shared[0]) / run_.dp;
    stop_ = shared[1] > 0;
    return Status::ok();
  }

  bool stop_requested() const override { return stop_ || run_.stop->load(); }

 private:
  Status hand_over(engine::model::Model& m, size_t i) {
    const auto& spec = m.table().specs()[i];
    handed_[i] = true;
    return plugin_status(
        run_.plugin->grads_ready(plugin_->state, m.grads().ptr<float>(),
                                 static_cast<size_t>(spec.offset),
                                 static_cast<size_t>(spec.numel()), err_, sizeof err_),
        err_, "grads_ready");
  }

  std::vector<bool> handed_;  // per parameter tensor: given to the plugin this step
  const DataParallelRun& run_;
  PluginInstance* plugin_;
  bool stop_ = false;
  char err_[1024] = {0};
};

}  // namespace

Status train_data_parallel(const DataParallelRun& run) {
  const config::JobConfig& job = *run.job;
  Result<int> mb = config::micro_batch_size(job, run.dp);
  if (!mb) return mb.status();

  // The single-rank trainer on this rank's slice of every global batch.
  engine::train::RunOptions o;
  o.model = job.model;
  o.train = job.training;
  o.train.micro_batch = *mb;
  o.data = job.data;
  o.name = job.name;
  o.run_dir = run.rank == 0 ? job.run_dir : "";  // rank 0 writes metrics.jsonl
  o.quiet = run.rank != 0;                       // and the step lines
  o.dp = run.dp;
  o.dp_rank = run.dp_rank;
  Result<std::unique_ptr<engine::train::Trainer>> trainer = engine::train::Trainer::create(o);
  if (!trainer) return trainer.status();

  // The data plugin, on this rank's dp communicator.
  PluginInstance plugin;
  partrain_comm_v1_t pcomm{};
  char err[1024] = {0};
  if (run.plugin != nullptr) {
    pcomm = make_plugin_comm(run.dp_comm);
    const size_t num_grads = static_cast<size_t>((*trainer)->model().num_params());
    partrain_init_args_v1_t args{sizeof(partrain_init_args_v1_t), run.plugin_config.c_str(),
                                 &pcomm, run.rank, 0, num_grads};
    plugin.api = run.plugin;
    PARTRAIN_RETURN_IF_ERROR(plugin_status(run.plugin->init(&args, &plugin.state, err, sizeof err), err, "init"));
  }
  DataParallelHooks hooks(run, &plugin);
  (*trainer)->set_hooks(&hooks);
  // Resume: every rank reads the whole weights and moments back from the pieces (written
  // on any dp size); the step fixes the data, dropout and learning rate from there on.
  if (run.resume != nullptr) {
    PARTRAIN_RETURN_IF_ERROR(store::restore_trainer(**trainer, run.ckpt_root, *run.resume));
    if (run.rank == 0) {
      log::info("worker", "resuming at step {} from {}/{} (written by {}, sample {}, epoch {})",
                run.resume->state.step, run.ckpt_root, store::step_folder(run.resume->state.step),
                run.resume->state.layout.empty() ? "one rank" : run.resume->state.layout,
                run.resume->state.consumed_samples, run.resume->state.epoch);
      if (std::string why = store::nothing_left(*run.resume, o.train.steps, run.ckpt_root); !why.empty()) {
        log::warn("worker", "{}", why);
      }
    }
  }
  std::unique_ptr<store::CheckpointSaver> saver;
  if (run.committer != nullptr) {
    store::SaverOptions so;
    so.root = run.ckpt_root;
    so.every = job.checkpoint.every;
    so.rank = run.rank;
    so.world = run.world;
    so.dp = run.dp;
    so.dp_rank = run.dp_rank;
    so.layout_name = job.parallelism.to_string();
    so.async = job.checkpoint.async;
    saver = std::make_unique<store::CheckpointSaver>(so, run.committer);
    (*trainer)->set_save_hook(saver.get());
  }
  PARTRAIN_RETURN_IF_ERROR((*trainer)->run());
  return saver ? saver->wait() : Status::ok();
}

}  // namespace partrain::worker
