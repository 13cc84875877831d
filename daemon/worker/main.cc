// partrain-worker: one rank of a job, started by partraind (never by hand). It reads its
// rank and the rendezvous address from the environment the agent sets (PARTRAIN_RANK,
// PARTRAIN_WORLD, PARTRAIN_COORDINATOR, PARTRAIN_JOB_SECRET, PARTRAIN_SPEC), resolves the
// same job the agent resolved, builds a communicator per layout group it needs through the
// store (dp: Gloo, or NCCL on GPU ranks; tp when tp > 1; ep and expert_dp when ep > 1; pp
// when pp > 1), loads the data plugin (and the tensor plugin "tp", the expert plugin "ep",
// the pipeline schedule plugin) from the site's plugin directory, and trains.
//
//   partrain-worker JOB.toml
//
// Exit codes as partraind's: 0 done, 2 configuration error, 75 retryable (a peer failed,
// or SIGTERM stopped the run at a step boundary), 1 anything else.
#include <signal.h>

#include <atomic>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "cli/exit_codes.h"
#include "comm/gloo/gloo_communicator.h"
#include "comm/store/secret.h"
#include "comm/store/store_client.h"
#include "common/log.h"
#include "common/trace.h"
#include "config/job_config.h"
#include "config/site_config.h"
#include "layout/layout.h"
#include "plugin/loader.h"
#include "plugin/expert_loader.h"
#include "plugin/tensor_loader.h"
#include "store/shard_file.h"
#include "worker/checkpoint_commit.h"
#include "worker/data_parallel.h"
#include "worker/device_comm.h"
#include "worker/pipeline_parallel.h"

namespace partrain::worker {
namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_stop(int) { g_stop.store(true); }

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

Result<int> env_int(const char* name) {
  const std::string text = env(name);
  int v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size()) {
    return Status::invalid(fmt::format("{}='{}': partrain-worker is started by partraind, which "
                                       "sets it; run partraind or `partrain run --nproc N`", name, text));
  }
  return v;
}

Status run(const std::string& job_path) {
  Result<int> rank = env_int("PARTRAIN_RANK");
  if (!rank) return rank.status();
  Result<int> world = env_int("PARTRAIN_WORLD");
  if (!world) return world.status();
  log::set_context("", env("PARTRAIN_NODE_NAME"), *rank);
  Result<config::SiteConfig> site = config::load_site_config("");
  if (!site) return site.status();
  config::apply_log_level(*site);
  // The agent passes the spec it resolved; the environment chain applies PARTRAIN_STEPS too.
  Result<config::JobConfig> job = config::resolve_job(job_path, *site, {});
  if (!job) return job.status();
  log::set_context(job->name, env("PARTRAIN_NODE_NAME"), *rank);
  PARTRAIN_RETURN_IF_ERROR(trace::configure_from_env(
      job->run_dir, *rank, fmt::format("rank {} {}", *rank, env("PARTRAIN_NODE_NAME"))));
  Result<Layout> layout = Layout::create(*world, job->parallelism);
  if (!layout) return layout.status();
  PARTRAIN_RETURN_IF_ERROR(config::validate_layout(*job, *world));
  if (layout->cp() != 1) {
    return Status::invalid(fmt::format(
        "--partrain={}: this partrain runs tensor-, pipeline-, expert- and data-parallel layouts "
        "only (cp 1); the context-parallel runtime is not installed yet", job->parallelism.to_string()));
  }
  if (layout->ep() > 1 && (layout->tp() > 1 || job->parallelism.zero > 0)) {
    return Status::invalid(fmt::format(
        "--partrain={}: expert parallelism runs with plain data and pipeline parallelism only "
        "(tp1, zero0) in this version; drop tp/zeroN, or drop ep", job->parallelism.to_string()));
  }
  if (layout->pp() > 1 && job->device != "cpu") {
    return Status::invalid(fmt::format(
        "--partrain={}: [job] device = {}: the pipeline executor runs on CPU ranks (Gloo) in this "
        "version; use --device cpu, or drop pp", job->parallelism.to_string(), job->device));
  }
  // Pipeline parallel: the schedule checked and the model partitioned before any rank
  // talks to another (every rank decides the same).
  std::optional<PipelinePlan> pipe;
  if (layout->pp() > 1) {
    Result<PipelinePlan> p = plan_pipeline(*job, *layout, site->plugin_dir);
    if (!p) return p.status();
    pipe = std::move(p).value();
    if (*rank == 0) {
      log::info("worker", "pipeline schedule {} (pp={}, m={}, v={}), checked; stage partition:\n{}",
                pipe->source, pipe->schedule.shape.pp, pipe->schedule.shape.m, pipe->schedule.shape.v,
                pipeline::describe_partition(pipe->parts, layout->pp()));
    }
  }
  const RankCoord coord = layout->coord(*rank);

  // Rendezvous (the coordinator's store), then the tp and dp communicators (Gloo over TCP).
  // Keys of this attempt of the worker group carry its prefix, so a restarted group starts
  // clean.
  const std::string prefix = env("PARTRAIN_ATTEMPT").empty() ? "" : env("PARTRAIN_ATTEMPT") + "/";
  const std::string coordinator = env("PARTRAIN_COORDINATOR");
  const size_t colon = coordinator.rfind(':');
  if (colon == std::string::npos) {
    return Status::invalid("PARTRAIN_COORDINATOR='" + coordinator + "': need host:port; partrain-worker "
                           "is started by partraind");
  }
  const std::string host = coordinator.substr(0, colon);
  const int port = std::atoi(coordinator.c_str() + colon + 1);
  Result<std::string> secret = comm::secret_from_env();
  if (!secret) return secret.status();
  Result<std::unique_ptr<comm::StoreClient>> client = comm::StoreClient::connect(host, port, *secret);
  if (!client) return client.status();
  std::unique_ptr<comm::StoreClient> store = std::move(client).value();
  // The checkpoint to resume from, as the coordinator chose it ("none": a fresh start).
  Result<std::string> resume_text = store->get(prefix + "resume", std::chrono::minutes(10));
  if (!resume_text) return resume_text.status();
  std::optional<store::Checkpoint> resume;
  if (*resume_text != "none") {
    Result<store::Checkpoint> c = store::decode_checkpoint(*resume_text);
    if (!c) return c.status();
    resume = std::move(c).value();
  }
  Result<std::unique_ptr<comm::StoreClient>> commit_client = store->clone();
  if (!commit_client) return commit_client.status();
  StoreCommitter committer(std::move(commit_client).value(), prefix);
  std::unique_ptr<comm::Communicator> dp_comm, tp_comm, ep_comm, expert_dp_comm, pp_comm;
  std::unique_ptr<plugin::Plugin> data_plugin;
  std::unique_ptr<plugin::TensorPlugin> tensor_plugin;
  std::unique_ptr<plugin::ExpertPlugin> expert_plugin;
  // A loopback coordinator means every rank is on this machine: loopback. Else the agent's
  // address for this node (Slurm's NodeAddr), else the node name.
  comm::GlooOptions go;
  go.host = host == "127.0.0.1" || host == "localhost" ? "127.0.0.1"
            : !env("PARTRAIN_NODE_ADDR").empty()     ? env("PARTRAIN_NODE_ADDR")
                                                     : env("PARTRAIN_NODE_NAME");
  if (layout->tp() > 1) {
    // The tp group (consecutive ranks) and the tensor plugin on it.
    const std::vector<int> members = layout->group(Axis::kTp, *rank);
    comm::GroupSpec spec{fmt::format("{}tp{}", prefix, members.front()), members, *rank};
    Result<std::unique_ptr<comm::Communicator>> c = comm::create_gloo_communicator(spec, *store, go);
    if (!c) return c.status();
    tp_comm = std::move(c).value();
    Result<std::unique_ptr<plugin::TensorPlugin>> p = plugin::find_tensor_plugin(site->plugin_dir, "tp");
    if (!p) return Status::invalid(p.status().message());
    tensor_plugin = std::move(p).value();
    if (*rank == 0) {
      log::info("worker", "tensor plugin {} {} from {} ({})", tensor_plugin->info().name,
                tensor_plugin->info().version, tensor_plugin->info().path,
                job->parallelism.sequence_parallel() ? "sp" : "nosp");
    }
  }
  // Expert parallel: the ep group (the all-to-alls) and, when dp > ep, the ranks holding
  // the same experts (their gradients' sum).
  for (auto [axis, name, out] : {std::tuple{Axis::kEp, "ep", &ep_comm},
                                 std::tuple{Axis::kExpertDp, "edp", &expert_dp_comm}}) {
    const std::vector<int> members = layout->group(axis, *rank);
    if (layout->ep() == 1 || members.size() < 2) continue;
    comm::GroupSpec spec{fmt::format("{}{}{}", prefix, name, members.front()), members, *rank};
    Result<std::unique_ptr<comm::Communicator>> c = comm::create_gloo_communicator(spec, *store, go);
    if (!c) return c.status();
    *out = std::move(c).value();
  }
  if (layout->ep() > 1) {  // the expert plugin "ep" on them
    Result<std::unique_ptr<plugin::ExpertPlugin>> p = plugin::find_expert_plugin(site->plugin_dir, "ep");
    if (!p) return Status::invalid(p.status().message());
    expert_plugin = std::move(p).value();
    if (*rank == 0) {
      log::info("worker", "expert plugin {} {} from {} (ep{}, expert_dp{})", expert_plugin->info().name,
                expert_plugin->info().version, expert_plugin->info().path, layout->ep(), layout->expert_dp());
    }
  }
  if (layout->dp() > 1) {
    // The data plugin: dp (zero0), zeroN, or PARTRAIN_DATA_PLUGIN.
    std::string name = job->parallelism.zero > 0 ? fmt::format("zero{}", job->parallelism.zero) : "dp";
    if (!env("PARTRAIN_DATA_PLUGIN").empty()) name = env("PARTRAIN_DATA_PLUGIN");
    Result<std::unique_ptr<plugin::Plugin>> p = plugin::find_plugin(site->plugin_dir, name);
    if (!p) return Status::invalid(p.status().message());
    if ((*p)->info().family != "data") {
      return Status::invalid(fmt::format("{}: is a {} plugin; the data-parallel strategy needs a "
                                         "data plugin", (*p)->info().path, (*p)->info().family));
    }
    // GPU ranks hand it device memory: only a plugin that takes it (PARTRAIN_CAP_CUDA), checked
    // before any GPU is touched.
    PARTRAIN_RETURN_IF_ERROR(check_plugin_memory(job->device, (*p)->info().capabilities, (*p)->info().name,
                                                 (*p)->info().path));
    data_plugin = std::move(p).value();
    if (*rank == 0) {
      log::info("worker", "data plugin {} {} from {}", data_plugin->info().name,
                data_plugin->info().version, data_plugin->info().path);
    }
    const std::vector<int> members = layout->group(Axis::kDp, *rank);
    comm::GroupSpec spec{fmt::format("{}dp{}", prefix, members.front()), members, *rank};
    // Gloo on CPU ranks, NCCL on GPU ranks (device_comm.h).
    Result<std::unique_ptr<comm::Communicator>> c = make_group_communicator(spec, *store, job->device, go);
    if (!c) return c.status();
    dp_comm = std::move(c).value();
  }
  DataParallelRun r;
  r.job = &*job;
  r.rank = *rank;
  r.world = *world;
  r.dp = layout->dp();
  r.dp_rank = coord.dp;
  r.dp_comm = dp_comm.get();
  r.plugin_v2 = data_plugin ? data_plugin->v2() : nullptr;
  r.plugin_v1 = data_plugin ? data_plugin->v1() : nullptr;
  if (data_plugin) {
    auto it = job->plugin_tables.find(data_plugin->info().name);
    if (it != job->plugin_tables.end()) r.plugin_config = it->second;
  }
  r.tp = layout->tp();
  r.tp_rank = coord.tp;
  r.sp = job->parallelism.sequence_parallel();
  r.tp_comm = tp_comm.get();
  r.tensor_plugin = tensor_plugin ? tensor_plugin->api() : nullptr;
  if (tensor_plugin) {
    auto it = job->plugin_tables.find(tensor_plugin->info().name);
    if (it != job->plugin_tables.end()) r.tensor_config = it->second;
  }
  r.ep = layout->ep();
  r.ep_rank = coord.ep;
  r.expert_dp = layout->expert_dp();
  r.expert_dp_rank = coord.expert_dp;
  r.ep_comm = ep_comm.get();
  r.expert_dp_comm = expert_dp_comm.get();
  r.expert_plugin = expert_plugin ? expert_plugin->api() : nullptr;
  if (expert_plugin) {
    auto it = job->plugin_tables.find(expert_plugin->info().name);
    if (it != job->plugin_tables.end()) r.expert_config = it->second;
  }
  r.stop = &g_stop;
  r.ckpt_root = store::checkpoint_root(job->checkpoint.dir, job->run_dir);
  r.committer = &committer;
  r.resume = resume ? &*resume : nullptr;
  if (pipe) {
    // The pp group (stride tp * dp: the outermost axis) carries the stages' transfers.
    const std::vector<int> members = layout->group(Axis::kPp, *rank);
    comm::GroupSpec spec{fmt::format("{}pp{}", prefix, members.front()), members, *rank};
    Result<std::unique_ptr<comm::Communicator>> c = comm::create_gloo_communicator(spec, *store, go);
    if (!c) return c.status();
    pp_comm = std::move(c).value();
    return train_pipeline_parallel(PipelineRun{&r, &*pipe, coord.pp, pp_comm.get()});
  }
  Status s = train_data_parallel(r);
  if (!s && dp_comm) dp_comm->abort(s.message());  // peers blocked on us fail at once
  if (!s && tp_comm) tp_comm->abort(s.message());
  if (!s && ep_comm) ep_comm->abort(s.message());
  if (!s && expert_dp_comm) expert_dp_comm->abort(s.message());
  return s;
}

}  // namespace
}  // namespace partrain::worker

int main(int argc, char** argv) {
  using namespace partrain;
  if (argc != 2) {
    std::fprintf(stderr, "usage: partrain-worker JOB.toml (started by partraind)\n");
    return cli::kExitUsage;
  }
  struct sigaction sa {};
  sa.sa_handler = worker::on_stop;
  ::sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  try {
    const Status s = worker::run(argv[1]);
    if (s.is_ok()) return cli::kExitOk;
    log::error("worker", "{}", s.message());
    return cli::exit_code_for(s);
  } catch (const std::exception& e) {
    log::error("worker", "internal error: {}", e.what());
    return cli::kExitFailure;
  }
}
