// See data_parallel.h. The step is the single-rank trainer's (engine/train/trainer.cc):
// this file adds the gradient sync through the data plugin, ZeRO's sharded state, and the
// loss/stop exchange.
#include "worker/data_parallel.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "engine/backend.h"
#include "engine/model/model.h"
#include "engine/train/trainer.h"
#include "planner/run_accounting.h"
#include "common/log.h"
#include "store/shard_file.h"
#include "worker/comm_adapter.h"
#include "worker/data_plugin.h"
#include "worker/expert_plugin.h"
#include "worker/device_comm.h"
#include "worker/tensor_plugin.h"

namespace partrain::worker {
namespace {

namespace engine = partrain::engine;

// What a ZeRO-sharded model asks of the data plugin (engine/model/sharding.h). The first
// error is kept (the engine cannot take one mid-backward) and every later call is skipped;
// the hooks report it at the next step boundary.
class ZeroComm final : public engine::model::ShardComm {
 public:
  ZeroComm(DataPlugin* plugin, comm::Communicator* dp) : plugin_(plugin), dp_(dp) {}

  void reduce_grads(const engine::Tensor& data, int64_t offset, const engine::Tensor& shard) override {
    if (!status_) return;
    status_ = plugin_->grads_ready(data.ptr<float>(), static_cast<size_t>(offset),
                                   static_cast<size_t>(data.numel()), shard.ptr<float>());
  }
  void release_grads(int64_t offset, int64_t count) override {
    if (status_) status_ = plugin_->grads_release(static_cast<size_t>(offset), static_cast<size_t>(count));
  }
  void gather_params(const engine::Tensor& shard, const engine::Tensor& dst, int64_t offset) override {
    if (!status_) return;
    status_ = plugin_->params_gather(shard.ptr<float>(), dst.ptr<float>(), static_cast<size_t>(offset),
                                     static_cast<size_t>(dst.numel()));
  }
  void wait_params(const engine::Tensor& dst) override {
    if (status_) status_ = plugin_->params_wait(dst.ptr<float>());
  }
  // A double through a float all-reduce: its float head and the float rest, summed apart.
  double sum(double x) override {
    if (!status_) return x;
    const float head = static_cast<float>(x);
    float parts[2] = {head, static_cast<float>(x - static_cast<double>(head))};
    status_ = dp_->all_reduce(parts, 2, comm::ReduceOp::kSum)->wait();
    return static_cast<double>(parts[0]) + static_cast<double>(parts[1]);
  }
  const Status& status() const { return status_; }

 private:
  DataPlugin* plugin_;
  comm::Communicator* dp_;
  Status status_;
};

// The trainer's hooks for a dp rank: gradients through the data plugin, the loss and the
// stop flag through one small all-reduce on the dp group.
class DataParallelHooks final : public engine::train::StepHooks {
 public:
  DataParallelHooks(const DataParallelRun& run, DataPlugin* plugin, ZeroComm* zero,
                    TensorPluginComm* tensor, ExpertPluginComm* expert, HostReducer* dp_values)
      : run_(run), plugin_(plugin), zero_(zero), tensor_(tensor), expert_(expert),
        dp_values_(dp_values) {}

  Status begin_step(int64_t step) override {
    if (plugin_ == nullptr) return Status::ok();
    return plugin_->step_begin(step);
  }

  // A block's gradients are final: hand its range over now, so the plugin's buckets are
  // reduced while the blocks below are still in backward. (ZeRO-2/3 models hand their
  // segments over themselves, every micro-batch.)
  Status block_grads_ready(engine::model::Model& m, int layer) override {
    if (plugin_ == nullptr || stage() >= 2) return Status::ok();
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
    if (tensor_ != nullptr) PARTRAIN_RETURN_IF_ERROR(tensor_->status());
    if (plugin_ == nullptr) return Status::ok();
    if (stage() < 2) {
      if (handed_.empty()) handed_.assign(m.table().specs().size(), false);
      for (size_t i = handed_.size(); i-- > 0;) {
        if (!handed_[i]) PARTRAIN_RETURN_IF_ERROR(hand_over(m, i));
      }
      handed_.assign(handed_.size(), false);  // the next step starts over
    }
    if (zero_ != nullptr) PARTRAIN_RETURN_IF_ERROR(zero_->status());
    PARTRAIN_RETURN_IF_ERROR(plugin_->grads_done(stage() < 2 ? m.grads().ptr<float>() : nullptr));
    if (expert_ != nullptr) {
      PARTRAIN_RETURN_IF_ERROR(expert_->status());
      PARTRAIN_RETURN_IF_ERROR(reduce_expert_grads(*expert_, m, 1.0f / static_cast<float>(run_.dp)));
    }
    return reduce_moe_stats(sm);
  }

  // ZeRO-1/2: every rank stepped its shard; gather them into the full parameters.
  Status after_step(engine::model::Model& m, engine::train::StepMetrics* sm) override {
    if (expert_ != nullptr) {  // the all-to-alls, the norm's sum, the experts' gradients: all exposed
      partrain_expert_stats_v1_t es{};
      PARTRAIN_RETURN_IF_ERROR(expert_->step_end(&es));
      sm->add_comm(engine::train::CommAxis::kEp, es.comm_ms, es.comm_ms,
                   static_cast<int>(es.collectives));
    }
    if (tensor_ != nullptr) {  // the regions' collectives: all exposed (each is waited for)
      partrain_tensor_stats_v1_t ts{};
      PARTRAIN_RETURN_IF_ERROR(tensor_->step_end(&ts));
      sm->add_comm(engine::train::CommAxis::kTp, ts.comm_ms, ts.comm_ms,
                   static_cast<int>(ts.collectives));
    }
    if (plugin_ == nullptr) return Status::ok();
    if (zero_ != nullptr) PARTRAIN_RETURN_IF_ERROR(zero_->status());
    if (stage() == 1 || stage() == 2) {
      float* params = m.params().ptr<float>();
      PARTRAIN_RETURN_IF_ERROR(plugin_->params_gather(m.shard_params().ptr<float>(), params, 0,
                                                      static_cast<size_t>(m.num_params())));
      PARTRAIN_RETURN_IF_ERROR(plugin_->params_wait(params));
    }
    partrain_sync_stats_v2_t stats{};
    PARTRAIN_RETURN_IF_ERROR(plugin_->step_end(&stats));
    sm->add_comm(engine::train::CommAxis::kDp, stats.comm_ms, stats.exposed_ms,
                 static_cast<int>(stats.collectives));
    return Status::ok();
  }

  // One 2-float all-reduce: the batch's mean loss and whether any rank was asked to stop.
  // The ranks of a tp group have the same loss; they agree on the stop flag first.
  Status reduce_loss(double* loss) override {
    float shared[2] = {static_cast<float>(*loss), run_.stop->load() ? 1.0f : 0.0f};
    if (tensor_ != nullptr) {
      PARTRAIN_RETURN_IF_ERROR(run_.tp_comm->all_reduce(shared + 1, 1, comm::ReduceOp::kMax)->wait());
      stop_ = shared[1] > 0;
    }
    if (run_.dp_comm == nullptr) return Status::ok();  // one dp rank: its loss, exactly
    PARTRAIN_RETURN_IF_ERROR(dp_values_->all_reduce(shared, 2, comm::ReduceOp::kSum));
    *loss = static_cast<double>(shared[0]) / run_.dp;
    stop_ = shared[1] > 0;
    return Status::ok();
  }

  bool stop_requested() const override { return stop_ || run_.stop->load(); }

 private:
  int stage() const { return plugin_->plan().stage; }

  // MoE routing counts and the aux loss of the global batch: summed over the dp group (the
  // counts are whole numbers well inside float's exact range), the aux loss averaged.
  Status reduce_moe_stats(engine::train::StepMetrics* sm) {
    if (sm->experts == 0 || run_.dp_comm == nullptr) return Status::ok();  // (GPU: staged)
    std::vector<float> v(sm->expert_tokens.begin(), sm->expert_tokens.end());
    v.push_back(static_cast<float>(sm->dropped_tokens));
    v.push_back(static_cast<float>(sm->aux_loss));
    PARTRAIN_RETURN_IF_ERROR(dp_values_->all_reduce(v.data(), v.size(), comm::ReduceOp::kSum));
    for (size_t i = 0; i < sm->expert_tokens.size(); ++i) sm->expert_tokens[i] = static_cast<int64_t>(v[i]);
    sm->dropped_tokens = static_cast<int64_t>(v[v.size() - 2]);
    sm->aux_loss = static_cast<double>(v.back()) / run_.dp;
    return Status::ok();
  }

  Status hand_over(engine::model::Model& m, size_t i) {
    const auto& spec = m.table().specs()[i];
    handed_[i] = true;
    if (spec.expert && run_.ep > 1) return Status::ok();  // reduce_expert_grads' part
    return plugin_->grads_ready(m.grads().ptr<float>() + spec.offset,
                                static_cast<size_t>(spec.offset), static_cast<size_t>(spec.numel()),
                                stage() == 1 ? m.shard_grads().ptr<float>() : nullptr);
  }

  std::vector<bool> handed_;  // per parameter tensor: given to the plugin this step
  const DataParallelRun& run_;
  DataPlugin* plugin_;  // null on one rank
  ZeroComm* zero_;      // null unless ZeRO
  TensorPluginComm* tensor_;  // null unless tp > 1
  ExpertPluginComm* expert_;  // null unless ep > 1
  HostReducer* dp_values_;    // the loss and stop flag over the dp group (GPU: staged)
  bool stop_ = false;
};

}  // namespace

store::SaverOptions saver_options(const DataParallelRun& run) {
  store::SaverOptions so;
  so.root = run.ckpt_root;
  so.every = run.job->checkpoint.every;
  so.rank = run.rank;
  so.world = run.world;
  so.dp = run.dp;
  so.dp_rank = run.dp_rank;
  so.layout_name = run.job->parallelism.to_string();
  so.async = run.job->checkpoint.async;
  return so;
}

Status write_memory(const std::string& run_dir, int rank, const engine::MemoryStats& mem) {
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  const std::string path = fmt::format("{}/memory.rank{}.json", run_dir, rank);
  std::ofstream out(path, std::ios::trunc);
  out << "{\"rank\":" << rank;
  for (int c = 0; c < engine::kNumMemCategories; ++c) {
    out << ",\"" << engine::mem_category_name(static_cast<engine::MemCategory>(c))
        << "\":" << mem.peak[static_cast<size_t>(c)];
  }
  out << ",\"total\":" << mem.peak_total << "}\n";
  out.flush();
  if (!out) return Status::io_error(path + ": cannot write the memory summary");
  return Status::ok();
}

Status train_data_parallel(const DataParallelRun& run) {
  const config::JobConfig& job = *run.job;
  // The model refuses tensor parallelism on bf16 backends too; this says so before any GPU
  // is touched, with the fix.
  if (job.device == "cuda" && run.tp > 1) {
    return Status::invalid(fmt::format("tp{} with [job] device = cuda: tensor parallelism runs on fp32 CPU "
                                       "ranks in this version (the CUDA backend keeps bf16); use dp alone on "
                                       "GPUs, or train tp on CPU ranks (--device cpu)", run.tp));
  }
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
  o.device = job.device;  // "cuda": the one GPU the agent made visible, cuda:0
  o.dp = run.dp;
  o.dp_rank = run.dp_rank;
  o.tp = engine::model::TensorOptions{run.tp_rank, run.tp, run.tp > 1 && run.sp};
  o.ep = engine::model::ExpertOptions{run.ep_rank, run.ep};
  // MFU against the hardware profile the user named (PARTRAIN_HARDWARE), else the device's
  // default (`cpu` on CPU ranks, none on GPUs).
  const char* hardware = std::getenv("PARTRAIN_HARDWARE");
  Result<planner::RunAccounting> acct =
      planner::run_accounting(job.model, job.device, hardware ? hardware : "");
  if (!acct) return acct.status();
  o.world = run.world;
  o.model_flops_per_token = acct->model_flops_per_token;
  o.peak_flops_per_rank = acct->peak_flops_per_rank;

  // The data plugin, on this rank's dp communicator: its plan says what is sharded, so it
  // comes before the model (sharded state is never allocated full-size).
  std::unique_ptr<DataPlugin> plugin;
  if (run.plugin_v1 != nullptr || run.plugin_v2 != nullptr) {
    plugin = std::make_unique<DataPlugin>(run.plugin_v1, run.plugin_v2);
    // This rank's flat buffer: its tensor-parallel pieces under tp.
    // Under ep the experts are reduced apart: the plugin sees the replicated parameters.
    const size_t num_params =
        replicated_numel(engine::model::build_param_table(job.model, o.tp, o.ep), run.ep);
    const uint64_t features = PARTRAIN_HOST_SHARD_OPTIMIZER | PARTRAIN_HOST_SHARD_GRADS |
                              PARTRAIN_HOST_SHARD_PARAMS | buffer_memory_feature(job.device);
    PARTRAIN_RETURN_IF_ERROR(plugin->init(run.plugin_config, run.dp_comm, run.rank, num_params, features));
    const partrain_data_plan_v2_t& plan = plugin->plan();
    o.shard.stage = plan.stage;
    o.shard.begin = static_cast<int64_t>(plan.shard_begin);
    o.shard.end = static_cast<int64_t>(plan.shard_end);
    o.shard.prefetch = plan.prefetch;
  }
  Result<std::unique_ptr<engine::train::Trainer>> trainer = engine::train::Trainer::create(o);
  if (!trainer) return trainer.status();
  // GPU ranks: NCCL after the backend's compute stream; the loss staged through the device.
  if (run.dp_comm != nullptr) PARTRAIN_RETURN_IF_ERROR(bind_to_backend(*run.dp_comm, (*trainer)->backend()));
  HostReducer dp_values(run.dp_comm, &(*trainer)->backend());
  std::unique_ptr<ZeroComm> zero;
  if (plugin && plugin->plan().stage > 0) {
    zero = std::make_unique<ZeroComm>(plugin.get(), run.dp_comm);
    (*trainer)->model().set_shard_comm(zero.get());
  }
  std::unique_ptr<TensorPluginComm> tensor;
  if (run.tp > 1) {
    tensor = std::make_unique<TensorPluginComm>(run.tensor_plugin, run.tp_comm);
    PARTRAIN_RETURN_IF_ERROR(tensor->init(run.tensor_config, o.tp.sp, run.rank, run.world));
    (*trainer)->model().set_tensor_comm(tensor.get());
  }
  std::unique_ptr<ExpertPluginComm> expert;
  if (run.ep > 1) {
    expert = std::make_unique<ExpertPluginComm>(run.expert_plugin, run.ep_comm, run.expert_dp_comm);
    PARTRAIN_RETURN_IF_ERROR(expert->init(run.expert_config, job.model.moe_experts, run.rank, run.world));
    (*trainer)->model().set_expert_comm(expert.get());
  }
  DataParallelHooks hooks(run, plugin.get(), zero.get(), tensor.get(), expert.get(), &dp_values);
  (*trainer)->set_hooks(&hooks);
  // What this rank writes and reads back: plain dp holds everything (and writes its 1/dp
  // slice of it); a ZeRO rank its shard of the flat buffer (under tp: of its tp pieces); a
  // tp rank its logical pieces (store/saver.h).
  std::unique_ptr<store::StateLayout> layout;
  if (plugin && plugin->plan().stage > 0) {
    layout = std::make_unique<store::ZeroStateLayout>(plugin->plan().stage, run.tp > 1 ? run.tp_rank : 0);
  } else if (run.tp > 1) {
    layout = std::make_unique<store::TensorParallelLayout>(run.tp_rank, run.dp, run.dp_rank);
  } else if (run.ep > 1) {
    layout = std::make_unique<store::ExpertParallelLayout>(run.dp, run.dp_rank, run.expert_dp,
                                                           run.expert_dp_rank);
  }
  // Resume: every rank reads what it holds back from the pieces (written on any dp size,
  // ZeRO stage or tp); the step fixes the data, dropout and learning rate from there on.
  if (run.resume != nullptr) {
    PARTRAIN_RETURN_IF_ERROR(store::restore_trainer(**trainer, run.ckpt_root, *run.resume, layout.get()));
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
    store::SaverOptions so = saver_options(run);
    so.layout = layout.get();
    saver = std::make_unique<store::CheckpointSaver>(so, run.committer);
    (*trainer)->set_save_hook(saver.get());
  }
  Status s = (*trainer)->run();
  if (saver && s.is_ok()) s = saver->wait();
  if (zero && s.is_ok()) s = zero->status();
  if (tensor && s.is_ok()) s = tensor->status();
  if (expert && s.is_ok()) s = expert->status();
  if (s.is_ok() && !job.run_dir.empty()) {
    s = write_memory(job.run_dir, run.rank, (*trainer)->backend().memory());
  }
  // An error may leave collectives in flight on the model's buffers: fail them at once
  // (peers blocked on us fail too), and let the plugin wait for them before the model
  // frees its memory.
  if (!s.is_ok() && run.dp_comm != nullptr) run.dp_comm->abort(s.message());
  if (!s.is_ok() && run.tp_comm != nullptr) run.tp_comm->abort(s.message());
  if (!s.is_ok() && run.ep_comm != nullptr) run.ep_comm->abort(s.message());
  if (!s.is_ok() && run.expert_dp_comm != nullptr) run.expert_dp_comm->abort(s.message());
  plugin.reset();
  return s;
}

}  // namespace partrain::worker
