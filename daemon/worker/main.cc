// partrain-worker: one rank of a job, started by partraind (never by hand). It reads its
// rank and the rendezvous address from the environment the agent sets, resolves the same
// job the agent resolved, meets its peers, and trains (worker_run.h).
//
//   partrain-worker JOB.toml
//
// Environment: set by partraind, one page in common/worker_env.h.
//
// Exit codes as partraind's (common/exit_codes.h): 0 done (after reporting the last step reached
// through the rendezvous: finished/<rank>), 2 configuration error, 75
// retryable (a peer failed, or SIGTERM stopped the run at a step boundary), 1 anything else.
#include <chrono>
#include <cstdio>
#include <new>
#include <cstdlib>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "comm/rendezvous/client.h"
#include "comm/rendezvous/keys.h"
#include "comm/rendezvous/secret.h"
#include "common/exit_codes.h"
#include "common/log.h"
#include "common/stop_signal.h"
#include "common/trace.h"
#include "common/worker_env.h"
#include "config/job_config.h"
#include "config/site_config.h"
#include "config/supported.h"
#include "layout/layout.h"
#include "store/shard_file.h"
#include "worker/commit_requester.h"
#include "engine/train/trainer.h"
#include "worker/worker_run.h"

namespace partrain::worker {
namespace {

// The address this rank's collectives listen on: loopback when every rank is on this
// machine (a loopback coordinator), else the agent's address for this node (Slurm's
// NodeAddr), else the node name.
comm::GlooOptions gloo_options(const WorkerEnv& w) {
  comm::GlooOptions go;
  go.host = w.coordinator_host == "127.0.0.1" || w.coordinator_host == "localhost" ? "127.0.0.1"
            : !w.node_addr.empty()                                       ? w.node_addr
                                                                         : w.node_name;
  return go;
}

// The checkpoint the coordinator chose for this attempt ("none": a fresh start).
Result<std::optional<store::Checkpoint>> fetch_resume(comm::RendezvousClient& store, const std::string& prefix) {
  Result<std::string> text = store.get(rdzv_keys::resume(prefix), std::chrono::minutes(10));
  if (!text) return text.status();
  if (*text == "none") return std::optional<store::Checkpoint>{};
  Result<store::Checkpoint> c = store::decode_checkpoint(*text);
  if (!c) return c.status();
  return std::optional<store::Checkpoint>(std::move(c).value());
}

Status run(const std::string& job_path, const std::atomic<bool>* stop) {
  Result<WorkerEnv> w = worker_env_from_env();
  if (!w) return w.status();
  const std::string scope = rdzv_keys::attempt_scope(w->attempt);  // this attempt's keys
  log::set_context("", w->node_name, w->rank);
  Result<config::SiteConfig> site = config::load_site_config("");
  if (!site) return site.status();
  config::apply_log_level(*site);
  // The agent passes the spec it resolved; the environment chain applies PARTRAIN_STEPS too.
  Result<config::JobConfig> job = config::resolve_job(job_path, *site, {});
  if (!job) return job.status();
  log::set_context(job->name, w->node_name, w->rank);
  PARTRAIN_RETURN_IF_ERROR(trace::configure_from_env(job->run_dir, w->rank,
                                                     fmt::format("rank {} {}", w->rank, w->node_name)));
  // The agent checked the job before it started this worker; the same check again is cheap,
  // and guards a worker started by hand.
  PARTRAIN_RETURN_IF_ERROR(config::check_job(*job, w->world));
  Result<Layout> layout = Layout::create(w->world, job->parallelism);
  if (!layout) return layout.status();
  // Pipeline parallel: the schedule checked and the model partitioned before any rank talks
  // to another (every rank decides the same).
  std::optional<PipelinePlan> pipe;
  if (layout->pp() > 1) {
    Result<PipelinePlan> p = plan_pipeline(*job, *layout, site->plugin_dir, plugin::Open::kDirect);
    if (!p) return p.status();
    pipe = std::move(p).value();
    if (w->rank == 0) {
      log::info("worker", "pipeline schedule {} (pp={}, m={}, v={}), checked; stage partition:\n{}", pipe->source,
                pipe->schedule.shape.pp, pipe->schedule.shape.m, pipe->schedule.shape.v,
                pipeline::describe_partition(pipe->parts, layout->pp()));
    }
  }
  // The agent probed these plugins (strategies.h check_strategies): opened here directly.
  Result<Strategies> strategies = load_strategies(*job, *layout, site->plugin_dir, plugin::Open::kDirect, w->rank == 0);
  if (!strategies) return strategies.status();
  // The rendezvous store: the resume point, the commit channel, the groups.
  Result<std::string> secret = comm::secret_from_env();
  if (!secret) return secret.status();
  Result<std::unique_ptr<comm::RendezvousClient>> store = comm::RendezvousClient::connect(w->coordinator_host, w->coordinator_port, *secret);
  if (!store) return store.status();
  Result<std::optional<store::Checkpoint>> resume = fetch_resume(**store, scope);
  if (!resume) return resume.status();
  Result<std::unique_ptr<comm::RendezvousClient>> commit_client = (*store)->clone();
  if (!commit_client) return commit_client.status();
  CommitRequester committer(std::move(commit_client).value(), scope);
  GroupOptions go;
  go.prefix = scope;
  go.device = job->device;
  go.gloo = gloo_options(*w);
  go.pp_chunks = pipe ? pipe->schedule.shape.v : 1;
  Result<ProcessGroups> groups = ProcessGroups::create(*layout, w->rank, **store, go);
  if (!groups) return groups.status();

  WorkerRun r;
  r.job = &*job;
  r.layout = &*layout;
  r.rank = w->rank;
  r.groups = &*groups;
  r.strategies = &*strategies;
  r.pipeline = pipe ? &*pipe : nullptr;
  r.stop = stop;
  r.model_flops_per_token = w->model_flops_per_token;
  r.peak_flops_per_rank = w->peak_flops_per_rank;
  r.ckpt_root = store::checkpoint_root(job->checkpoint.dir, job->run_dir);
  r.committer = &committer;
  r.resume = *resume ? &**resume : nullptr;
  r.init = w->init;
  PARTRAIN_RETURN_IF_ERROR(train(r));
  // Success is the run's end reached, said through the rendezvous: the agent counts an exit 0
  // without this key as a failure of this rank (agent/supervise.h).
  return (*store)->set(rdzv_keys::finished(scope, w->rank), std::to_string(job->training.steps));
}

}  // namespace
}  // namespace partrain::worker

int main(int argc, char** argv) {
  using namespace partrain;
  if (argc != 2) {
    std::fprintf(stderr, "usage: partrain-worker JOB.toml (started by partraind)\n");
    return kExitUsage;
  }
  const std::atomic<bool>& stop = install_stop_signal();
  try {
    const Status s = worker::run(argv[1], &stop);
    if (s.is_ok()) return kExitOk;
    if (engine::train::is_stopped_at(s)) {  // an orderly stop (requeue, time limit): exit 75
      log::info("worker", "{}", s.message());
      return exit_code_for(s);
    }
    log::error("worker", "{}", s.message());
    return exit_code_for(s);
  } catch (const std::bad_alloc&) {
    log::error("worker", "{}", kOutOfMemoryMessage);
    return kExitUsage;
  } catch (const std::exception& e) {
    log::error("worker", "internal error: {}", e.what());
    return kExitFailure;
  }
}
