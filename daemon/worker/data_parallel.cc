// See data_parallel.h. The step is the single-rank trainer's (engine/train/trainer.cc):
// this file adds the gradient sync through the data plugin and the loss/stop exchange.
#include "worker/data_parallel.h"

#include <memory>
#include <vector>

#include <fmt/format.h>

#include "engine/backend.h"
#include "engine/model/model.h"
#include "engine/train/trainer.h"
#include "worker/data_plugin.h"

namespace partrain::worker {
namespace {

namespace engine = partrain::engine;

// The trainer's hooks for a dp rank: gradients through the data plugin, the loss and the
// stop flag through one small all-reduce on the dp group.
class DataParallelHooks final : public engine::train::StepHooks {
 public:
  DataParallelHooks(const DataParallelRun& run, DataPlugin* plugin) : run_(run), plugin_(plugin) {}

  Status begin_step(int64_t step) override {
    if (plugin_ == nullptr) return Status::ok();
    return plugin_->step_begin(step);
  }

  // A block's gradients are final: hand its range over now, so the plugin's buckets are
  // all-reduced while the blocks below are still in backward.
  Status block_grads_ready(engine::model::Model& m, int layer) override {
    if (plugin_ == nullptr) return Status::ok();
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
    if (plugin_ == nullptr) return Status::ok();
    float* g = m.grads().ptr<float>();
    if (handed_.empty()) handed_.assign(m.table().specs().size(), false);
    for (size_t i = handed_.size(); i-- > 0;) {
      if (!handed_[i]) PARTRAIN_RETURN_IF_ERROR(hand_over(m, i));
    }
    handed_.assign(handed_.size(), false);  // the next step starts over
    PARTRAIN_RETURN_IF_ERROR(plugin_->grads_done(g));
    partrain_sync_stats_v2_t stats{};
    PARTRAIN_RETURN_IF_ERROR(plugin_->step_end(&stats));
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
    return plugin_->grads_ready(m.grads().ptr<float>() + spec.offset,
                                static_cast<size_t>(spec.offset), static_cast<size_t>(spec.numel()),
                                nullptr);
  }

  std::vector<bool> handed_;  // per parameter tensor: given to the plugin this step
  const DataParallelRun& run_;
  DataPlugin* plugin_;  // null on one rank
  bool stop_ = false;
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
  std::unique_ptr<DataPlugin> plugin;
  if (run.plugin_v1 != nullptr || run.plugin_v2 != nullptr) {
    plugin = std::make_unique<DataPlugin>(run.plugin_v1, run.plugin_v2);
    const size_t num_params = static_cast<size_t>((*trainer)->model().num_params());
    PARTRAIN_RETURN_IF_ERROR(plugin->init(run.plugin_config, run.dp_comm, run.rank, num_params, 0));
    if (plugin->plan().stage != 0) {
      return Status::invalid("the data plugin asks for ZeRO sharding, which this worker lacks");
    }
  }
  DataParallelHooks hooks(run, plugin.get());
  (*trainer)->set_hooks(&hooks);
  return (*trainer)->run();
}

}  // namespace partrain::worker
