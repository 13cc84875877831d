// See data_parallel.h. The step reads like the single-rank trainer's
// (engine/train/trainer.cc), with the batch slice and the gradient sync added.
#include "worker/data_parallel.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "common/log.h"
#include "engine/backend.h"
#include "engine/data/dataset.h"
#include "engine/model/model.h"
#include "engine/train/optimizer.h"
#include "engine/train/trainer.h"
#include "worker/comm_adapter.h"

namespace partrain::worker {
namespace {

namespace engine = partrain::engine;
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

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

}  // namespace

Status train_data_parallel(const DataParallelRun& run) {
  const config::JobConfig& job = *run.job;
  const engine::TrainOptions& tr = job.training;
  const int T = job.model.seq_len;
  const int D = run.dp;
  Result<int> mb_r = config::micro_batch_size(job, D);
  if (!mb_r) return mb_r.status();
  Result<int> accum_r = config::grad_accum_steps(job, D);
  if (!accum_r) return accum_r.status();
  const int mb = *mb_r, accum = *accum_r;

  // Data, device, model and optimizer: as the single-rank trainer builds them.
  Result<std::shared_ptr<engine::data::TokenDataset>> ds =
      engine::data::TokenDataset::open(job.data, job.model.vocab_size, T);
  if (!ds) return ds.status();
  if ((*ds)->num_windows() == 0) {
    return Status::invalid(fmt::format("[data] the shards hold fewer than one sequence of "
                                       "seq_len + 1 = {} tokens", T + 1));
  }
  engine::data::Sampler sampler((*ds)->num_windows(), tr.seed);
  Result<std::unique_ptr<engine::Backend>> be = engine::make_backend("cpu");
  if (!be) return be.status();
  Result<std::unique_ptr<engine::model::Model>> model =
      engine::model::Model::create(job.model, be->get(), mb, tr.seed);
  if (!model) return model.status();
  engine::model::Model& m = **model;
  Result<std::unique_ptr<engine::train::AdamW>> opt = engine::train::AdamW::create(&m, tr);
  if (!opt) return opt.status();

  // The data plugin, on this rank's dp communicator.
  PluginInstance plugin;
  partrain_comm_v1_t pcomm{};
  const engine::Tensor grads = m.grads();
  const size_t num_grads = static_cast<size_t>(m.num_params());
  char err[1024] = {0};
  if (run.plugin != nullptr) {
    pcomm = make_plugin_comm(run.dp_comm);
    partrain_init_args_v1_t args{sizeof(partrain_init_args_v1_t), run.plugin_config.c_str(),
                                 &pcomm, run.rank, 0, num_grads};
    plugin.api = run.plugin;
    PARTRAIN_RETURN_IF_ERROR(plugin_status(run.plugin->init(&args, &plugin.state, err, sizeof err), err, "init"));
  }

  std::ofstream metrics;
  if (run.rank == 0 && !job.run_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(job.run_dir, ec);
    metrics.open(job.run_dir + "/metrics.jsonl", std::ios::trunc);
    if (!metrics) return Status::io_error(job.run_dir + "/metrics.jsonl: cannot open for writing");
  }
  if (run.rank == 0) {
    log::info("worker", "{}: {} parameters, dp {}, global batch {} = {} x {} micro-batches x {} "
              "ranks", job.name, m.num_params(), D, tr.global_batch, mb, accum, D);
  }
  std::vector<int32_t> inputs(static_cast<size_t>(mb) * T), targets(inputs.size());
  const auto& specs = m.table().specs();
  int64_t tokens = 0;
  for (int64_t step = 0; step < tr.steps; ++step) {
    log::set_step(step + 1);
    engine::train::StepMetrics sm;
    const auto t_step = Clock::now();
    if (plugin.state != nullptr && run.plugin->step_begin != nullptr) {
      PARTRAIN_RETURN_IF_ERROR(plugin_status(run.plugin->step_begin(plugin.state, step, err, sizeof err), err, "step_begin"));
    }
    // This rank's micro-batches of the global batch; gradients accumulate scaled 1/accum.
    m.zero_grads();
    double loss = 0.0;
    for (int k = 0; k < accum; ++k) {
      const uint64_t first = static_cast<uint64_t>(step) * tr.global_batch +
                             (static_cast<uint64_t>(k) * D + run.dp_rank) * mb;
      engine::data::read_samples(**ds, sampler, first, mb, T, inputs.data(), targets.data());
      auto t0 = Clock::now();
      Result<engine::model::LossParts> parts = m.forward({inputs.data(), targets.data(), mb, first, step});
      if (!parts) return parts.status();
      sm.fwd_ms += ms_since(t0);
      t0 = Clock::now();
      m.backward(1.0f / static_cast<float>(accum));
      sm.bwd_ms += ms_since(t0);
      loss += parts->loss;
    }
    // Gradient sync: every parameter's range is final; hand them over back to front.
    partrain_sync_stats_v1_t stats{};
    if (plugin.state != nullptr) {
      float* g = grads.ptr<float>();
      for (auto it = specs.rbegin(); it != specs.rend(); ++it) {
        PARTRAIN_RETURN_IF_ERROR(plugin_status(
            run.plugin->grads_ready(plugin.state, g, static_cast<size_t>(it->offset),
                                    static_cast<size_t>(it->numel()), err, sizeof err), err, "grads_ready"));
      }
      PARTRAIN_RETURN_IF_ERROR(plugin_status(run.plugin->grads_done(plugin.state, g, &stats, err, sizeof err), err, "grads_done"));
    }
    // The loss of the whole batch, and whether any rank was asked to stop.
    float shared[2] = {static_cast<float>(loss / accum), run.stop->load() ? 1.0f : 0.0f};
    if (run.dp_comm != nullptr) {
      PARTRAIN_RETURN_IF_ERROR(run.dp_comm->all_reduce(shared, 2, comm::ReduceOp::kSum)->wait());
    }
    // Clip by the global norm and step: identical grads give identical updates everywhere.
    const auto t_opt = Clock::now();
    sm.lr = engine::train::lr_at(tr, step);
    const engine::train::OptimizerStepStats st = (*opt)->step(sm.lr);
    sm.opt_ms = ms_since(t_opt);
    tokens += static_cast<int64_t>(tr.global_batch) * T;
    sm.step = step + 1;
    sm.loss = static_cast<double>(shared[0]) / D;
    if (D == 1) sm.loss = loss / accum;  // exactly the single-rank number
    sm.grad_norm = st.grad_norm;
    sm.tokens = tokens;
    sm.step_ms = ms_since(t_step);
    if (!std::isfinite(sm.loss)) {
      return Status::internal(fmt::format("step {}: loss is {}; lower [training] lr or raise "
                                          "warmup_steps", sm.step, sm.loss));
    }
    const double share = sm.step_ms > 0 ? stats.exposed_ms / sm.step_ms : 0.0;
    if (run.rank == 0) {
      std::string line = engine::train::metrics_json(sm);
      line.pop_back();  // the closing brace: the sync's numbers go inside
      line += fmt::format(",\"comm_ms\":{:.3f},\"exposed_ms\":{:.3f},\"exposed_share\":{:.4f},"
                          "\"collectives\":{},\"dp\":{}}}", stats.comm_ms, stats.exposed_ms, share,
                          stats.collectives, D);
      if (metrics.is_open()) metrics << line << '\n' << std::flush;
      if (sm.step % std::max(1, tr.log_every) == 0 || sm.step == tr.steps) {
        std::printf("step %5lld/%lld | loss %.6f | lr %.3e | norm %.4f | %8.0f tok/s | %7.1f ms | "
                    "comm %.1f ms, exposed %.1f ms (%.0f%% of the step)\n",
                    static_cast<long long>(sm.step), static_cast<long long>(tr.steps), sm.loss,
                    static_cast<double>(sm.lr), static_cast<double>(sm.grad_norm),
                    tr.global_batch * T / (sm.step_ms / 1e3), sm.step_ms, stats.comm_ms,
                    stats.exposed_ms, 100 * share);
        std::fflush(stdout);
      }
    }
    if (shared[1] > 0 && sm.step < tr.steps) {
      return Status::unavailable(fmt::format("stopped at step {} (SIGTERM/SIGINT)", sm.step));
    }
  }
  return Status::ok();
}

}  // namespace partrain::worker
