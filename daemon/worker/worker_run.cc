// See worker_run.h. RankTraining holds one rank's pieces in the order they must be freed:
// members are destroyed bottom-up, so the saver finishes first, the plugins finalize (waiting
// for their collectives) while the model's buffers still exist, and the trainer goes last.
#include "worker/worker_run.h"

#include <array>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "common/log.h"
#include "worker/context_plugin_comm.h"
#include "engine/model/stage.h"
#include "engine/train/trainer.h"
#include "worker/data_plugin_comm.h"
#include "worker/transports.h"
#include "worker/expert_plugin_comm.h"
#include "worker/parallel_hooks.h"
#include "worker/pipeline_executor.h"
#include "worker/tensor_plugin_comm.h"
#include "worker/zero_comm.h"

namespace partrain::worker {
namespace {

namespace train = partrain::engine::train;

// <run_dir>/memory.rank<R>.json: this rank's peak bytes per memory category.
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

class RankTraining {
 public:
  explicit RankTraining(const WorkerRun& run)
      : run_(run), job_(*run.job), layout_(*run.layout), coord_(run.layout->coord(run.rank)) {}
  Status setup();
  Status resume();
  Status train();

 private:
  Result<train::RunOptions> options() const;
  Status init_data_plugin(train::RunOptions* o);
  Status plug_strategies();
  void choose_state_layout();
  comm::Communicator* group(Axis axis) const { return run_.groups->get(axis); }
  // Under cp the data plugin and the checkpoint slices span dp x cp (the cp ranks hold the
  // same weights): its size and this rank's place in it.
  int data_ranks() const { return layout_.dp() * layout_.cp(); }
  int data_rank() const { return coord_.dp_cp; }

  const WorkerRun& run_;
  const config::JobConfig& job_;
  const Layout& layout_;
  const RankCoord coord_;
  std::unique_ptr<train::Trainer> trainer_;
  std::unique_ptr<PipelineExecutor> executor_;
  std::unique_ptr<DataPluginComm> data_;
  std::unique_ptr<DataPluginComm> expert_data_;  // ZeRO with ep: the data plugin on the experts' view
  std::vector<std::unique_ptr<ZeroComm>> zero_;  // one per model part
  std::unique_ptr<TensorPluginComm> tensor_;
  std::unique_ptr<ExpertPluginComm> expert_;
  std::unique_ptr<ContextPluginComm> context_;
  std::unique_ptr<ParallelHooks> hooks_;
  std::unique_ptr<store::StateLayout> state_layout_;
  std::unique_ptr<store::CheckpointSaver> saver_;
};

// The one-rank trainer's options on this rank's slice: its dp slice of every batch, its tp,
// ep and cp coordinates, its pipeline stages; rank 0 alone writes metrics.jsonl and step lines.
Result<train::RunOptions> RankTraining::options() const {
  Result<int> mb = config::micro_batch_size(job_, layout_.dp());
  if (!mb) return mb.status();
  train::RunOptions o;
  o.model = job_.model;
  o.train = job_.training;
  o.train.micro_batch = *mb;
  o.data = job_.data;
  o.name = job_.name;
  o.run_dir = run_.rank == 0 ? job_.run_dir : "";
  o.quiet = run_.rank != 0;
  o.device = job_.device;  // "cuda": the one GPU the agent made visible, cuda:0
  o.precision = job_.precision;
  o.dp = layout_.dp();
  o.dp_rank = coord_.dp;
  o.tp = engine::model::TensorOptions{coord_.tp, layout_.tp(), layout_.tp() > 1 && job_.parallelism.sequence_parallel()};
  o.ep = engine::model::ExpertOptions{coord_.ep, layout_.ep()};
  o.cp = engine::model::ContextOptions{coord_.cp, layout_.cp()};
  if (run_.pipeline != nullptr) o.stages = stage_options(*run_.pipeline, coord_.pp);
  o.pp = layout_.pp();
  o.world = layout_.world();
  o.model_flops_per_token = run_.model_flops_per_token;
  o.peak_flops_per_rank = run_.peak_flops_per_rank;
  o.stop = run_.stop;
  o.save_path = run_.save_path;
  o.progress_bar = run_.progress_bar;
  return o;
}

// The data plugin, on this rank's dp (dp x cp) group, before the model: its plan says what is
// sharded (o->shard), so sharded state is never allocated full-size. It sees the replicated
// parameters of every part (the dense view, engine/model/shard_views.h), one part after the
// other. Under ep the experts are reduced over expert-dp apart: by the ep plugin, or under
// ZeRO by a second instance of the data plugin on the experts' view, sharded over expert-dp.
Status RankTraining::init_data_plugin(train::RunOptions* o) {
  const Loaded<plugin::DataPlugin>& loaded = run_.strategies->data;
  if (!loaded) return Status::ok();
  if (loaded.plugin->v1() != nullptr && o->stages.size() > 1) {
    return Status::invalid("the data plugin speaks only ABI v1, which needs one gradient buffer; interleaved "
                           "pipelines need a v2 data plugin (dp)");
  }
  std::array<size_t, engine::model::kNumViews> numel{};
  const std::vector<engine::model::StageOptions> stages =
      o->stages.empty() ? std::vector<engine::model::StageOptions>{{}} : o->stages;
  for (const engine::model::StageOptions& s : stages) {
    const engine::model::PartViews views(engine::model::build_stage_table(job_.model, o->tp, o->ep, s), o->ep.size > 1);
    for (int v = 0; v < engine::model::kNumViews; ++v) {
      numel[static_cast<size_t>(v)] += static_cast<size_t>(views.size(static_cast<engine::model::View>(v)));
    }
  }
  // GPU ranks: device buffers, and the gradient shard staged (ZeroComm adds the plugin's results).
  const uint64_t device = buffer_memory_feature(job_.device);
  const uint64_t features = PARTRAIN_HOST_SHARD_OPTIMIZER | PARTRAIN_HOST_SHARD_GRADS | PARTRAIN_HOST_SHARD_PARAMS |
                            device | (device != 0 ? PARTRAIN_HOST_SHARD_STAGED : 0);
  data_ = std::make_unique<DataPluginComm>(loaded.plugin->v1(), loaded.plugin->v2());
  PARTRAIN_RETURN_IF_ERROR(data_->init(loaded.config, run_.groups->data_group(), run_.rank, numel[0], features));
  const partrain_data_plan_v2_t& plan = data_->plan();
  o->shard.stage = plan.stage;
  o->shard.prefetch = plan.prefetch;
  o->shard.view[0] = {static_cast<int64_t>(plan.shard_begin), static_cast<int64_t>(plan.shard_end)};
  if (plan.stage > 0 && layout_.ep() > 1) {
    expert_data_ = std::make_unique<DataPluginComm>(loaded.plugin->v1(), loaded.plugin->v2());
    PARTRAIN_RETURN_IF_ERROR(expert_data_->init(loaded.config, group(Axis::kExpertDp), run_.rank, numel[1], features));
    const partrain_data_plan_v2_t& ep = expert_data_->plan();
    if (ep.stage != plan.stage) {
      return Status::internal(fmt::format("data plugin: its instance on the experts planned zero{} but the one on "
                                          "the dense parameters zero{}; fix the plugin", ep.stage, plan.stage));
    }
    o->shard.view[1] = {static_cast<int64_t>(ep.shard_begin), static_cast<int64_t>(ep.shard_end)};
  }
  return Status::ok();
}

// The tp, ep, cp and ZeRO strategies inside every model part, the step's hooks over all of
// them, and the pipeline executor in place of the plain micro-batch loop.
Status RankTraining::plug_strategies() {
  // GPU ranks: every device transport after the compute stream (the staged one copies through
  // the backend).
  for (comm::Communicator* c : run_.groups->all()) PARTRAIN_RETURN_IF_ERROR(bind_to_backend(*c, trainer_->backend()));
  if (data_ && data_->plan().stage > 0) {
    for (train::ModelPart& p : trainer_->parts()) {
      zero_.push_back(std::make_unique<ZeroComm>(std::array<DataPluginComm*, engine::model::kNumViews>{
                                                     data_.get(), expert_data_.get()},
                                                 run_.groups->data_host(), p.views, p.view_offset, layout_.ep(),
                                                 &trainer_->backend(), buffer_memory_feature(job_.device) != 0));
    }
  }
  if (const Loaded<plugin::TensorPlugin>& t = run_.strategies->tensor; t) {
    tensor_ = std::make_unique<TensorPluginComm>(t.plugin->api(), group(Axis::kTp), run_.groups->host(Axis::kTp));
    PARTRAIN_RETURN_IF_ERROR(tensor_->init(t.config, trainer_->options().tp.sp, run_.rank, layout_.world()));
  }
  if (const Loaded<plugin::ExpertPlugin>& e = run_.strategies->expert; e) {
    expert_ = std::make_unique<ExpertPluginComm>(e.plugin->api(), group(Axis::kEp), run_.groups->host(Axis::kEp),
                                                 group(Axis::kExpertDp));
    PARTRAIN_RETURN_IF_ERROR(expert_->init(e.config, job_.model.moe_experts, run_.rank, layout_.world()));
  }
  if (const Loaded<plugin::ContextPlugin>& c = run_.strategies->context; c) {
    context_ = std::make_unique<ContextPluginComm>(c.plugin->api(), group(Axis::kCp), &trainer_->backend());
    PARTRAIN_RETURN_IF_ERROR(context_->init(c.config, run_.rank, layout_.world()));
  }
  for (size_t i = 0; i < trainer_->parts().size(); ++i) {
    engine::model::Model* p = trainer_->parts()[i].model.get();
    if (!zero_.empty() && tensor_) zero_[i]->sum_over_tp(p->table(), tensor_.get());
    if (!zero_.empty()) p->set_shard_comm(zero_[i].get());
    if (tensor_) p->set_tensor_comm(tensor_.get());
    if (expert_) p->set_expert_comm(expert_.get());
    if (context_) PARTRAIN_RETURN_IF_ERROR(p->set_context_comm(context_.get()));
  }
  ParallelAxes axes;
  axes.data = data_.get();
  axes.expert_data = expert_data_.get();
  for (const std::unique_ptr<ZeroComm>& z : zero_) axes.zero.push_back(z.get());
  axes.tensor = tensor_.get();
  axes.expert = expert_.get();
  axes.context = context_.get();
  axes.tp_host = run_.groups->host(Axis::kTp);
  axes.pp_host = run_.groups->host(Axis::kPp);
  axes.dp_host = run_.groups->data_host();
  axes.pp = group(Axis::kPp);
  axes.memory = tensor_memory(job_.device);
  axes.dp = layout_.dp();
  axes.cp = layout_.cp();
  hooks_ = std::make_unique<ParallelHooks>(*trainer_, axes);
  trainer_->set_hooks(hooks_.get());
  if (run_.pipeline != nullptr) {
    const pipeline::Schedule& s = run_.pipeline->schedule;
    executor_ = std::make_unique<PipelineExecutor>(s.shape, s.ranks[static_cast<size_t>(coord_.pp)], run_.groups,
                                                   axes.pp_host, axes.memory);
    PARTRAIN_RETURN_IF_ERROR(executor_->init(*trainer_));
    trainer_->set_micro_batches(executor_.get());
  }
  return Status::ok();
}

// What this rank writes and reads back (store/saver.h): a ZeRO rank its shard (under tp of
// its tp pieces; under ep its dense and expert ranges); an ep rank its dp slice of the
// replicated tensors and its expert-dp slice of its experts (under tp of its pieces); a tp or
// pipeline rank its dp slice of each part's flat buffer; plain dp its dp slice of every tensor
// (the saver's default). Under cp the "dp slices" are of the dp x cp group: cp does not
// change what is saved, only who writes which slice.
void RankTraining::choose_state_layout() {
  const int tp_rank = layout_.tp() > 1 ? coord_.tp : 0;
  if (!zero_.empty()) {
    state_layout_ = std::make_unique<store::ZeroStateLayout>(data_->plan().stage, tp_rank);
  } else if (layout_.ep() > 1) {
    state_layout_ = std::make_unique<store::ExpertParallelLayout>(data_ranks(), data_rank(), layout_.expert_dp(),
                                                                  coord_.expert_dp, tp_rank);
  } else if (layout_.tp() > 1 || layout_.pp() > 1) {
    state_layout_ = std::make_unique<store::FlatSliceLayout>(tp_rank, data_ranks(), data_rank());
  }
}

Status RankTraining::setup() {
  Result<train::RunOptions> o = options();
  if (!o) return o.status();
  PARTRAIN_RETURN_IF_ERROR(init_data_plugin(&*o));
  Result<std::unique_ptr<train::Trainer>> t = train::Trainer::create(*o);
  if (!t) return t.status();
  trainer_ = std::move(t).value();
  if (run_.pipeline != nullptr && (run_.rank == 0 || coord_.dp == 0)) {
    for (size_t c = 0; c < trainer_->parts().size(); ++c) {
      const engine::model::Model& m = *trainer_->parts()[c].model;
      log::info("worker", "pp rank {}: stage {} = blocks {}-{}{}{}, {} parameters, {} activation slots", coord_.pp,
                run_.pipeline->schedule.shape.stage(coord_.pp, static_cast<int>(c)), m.stage().first_block,
                m.stage().end_block - 1, m.first_stage() ? " + embeddings" : "", m.last_stage() ? " + head" : "",
                m.num_params(), m.stage().slots);
    }
  }
  PARTRAIN_RETURN_IF_ERROR(plug_strategies());
  choose_state_layout();
  if (run_.committer != nullptr) {
    store::SaverOptions so;
    so.root = run_.ckpt_root;
    so.every = job_.checkpoint.every;
    so.rank = run_.rank;
    so.world = layout_.world();
    so.dp = data_ranks();
    so.dp_rank = data_rank();
    so.layout = state_layout_.get();
    so.layout_name = job_.parallelism.to_string();
    so.async = job_.checkpoint.async;
    saver_ = std::make_unique<store::CheckpointSaver>(so, run_.committer);
    trainer_->set_save_hook(saver_.get());
  }
  return Status::ok();
}

// Every part reads what it holds back from the checkpoint's pieces, whatever layout wrote
// them; the step fixes the data, dropout and learning rate from there on. A fresh start
// with --init reads its slices of the Hugging Face weights the same way, by logical name.
Status RankTraining::resume() {
  if (run_.resume != nullptr) {
    if (!run_.init.empty() && run_.rank == 0) {
      log::warn("store", "--init {} is not used: the run resumes from its checkpoint of step {}", run_.init,
                run_.resume->state.step);
    }
    return store::restore_trainer(*trainer_, run_.ckpt_root, *run_.resume, state_layout_.get(), run_.rank == 0);
  }
  if (run_.init.empty()) return Status::ok();
  PARTRAIN_RETURN_IF_ERROR(store::init_from_hf(*trainer_, run_.init, state_layout_.get()));
  if (run_.rank == 0) log::info("engine", "starting from the weights of {}", run_.init);
  return Status::ok();
}

Status RankTraining::train() {
  Status s = trainer_->run();
  if (saver_ && s.is_ok()) s = saver_->wait();
  for (const std::unique_ptr<ZeroComm>& z : zero_) {
    if (s.is_ok()) s = z->status();
  }
  if (tensor_ && s.is_ok()) s = tensor_->status();
  if (expert_ && s.is_ok()) s = expert_->status();
  if (context_ && s.is_ok()) s = context_->status();
  if (s.is_ok() && !job_.run_dir.empty()) s = write_memory(job_.run_dir, run_.rank, trainer_->backend().memory());
  return s;
}

}  // namespace

Status train(const WorkerRun& run) {
  RankTraining rank(run);
  Status s = rank.setup();
  if (s) s = rank.resume();
  if (s) s = rank.train();
  // An error may leave collectives in flight on the model's buffers: fail them now (peers
  // blocked on this rank fail too), before the plugins and the model are freed.
  if (!s) run.groups->abort_all(s.message());
  return s;
}

}  // namespace partrain::worker
