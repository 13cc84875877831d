// The agent's life, in order: resolve the job, share a secret and start the rendezvous
// store, meet the other agents, open the state store, then run worker groups (supervise.h)
// until one ends, and say done. Each phase returns a Status; run_agent maps it to the exit
// code once. See agent.h.
#include "agent/agent.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "agent/checkpoint_committer.h"
#include "agent/coordinator_address.h"
#include "agent/gpu_binding.h"
#include "agent/heartbeat.h"
#include "agent/resume_policy.h"
#include "agent/supervise.h"
#include "agent/supervisor.h"
#include "comm/rendezvous/client.h"
#include "comm/rendezvous/keys.h"
#include "comm/rendezvous/secret.h"
#include "comm/rendezvous/server.h"
#include "common/exit_codes.h"
#include "common/install_dir.h"
#include "common/log.h"
#include "common/stop_signal.h"
#include "common/version.h"
#include "common/worker_env.h"
#include "config/job_config.h"
#include "config/site_config.h"
#include "config/supported.h"
#include "worker/strategies.h"
#include "layout/layout.h"
#include "planner/run_accounting.h"
#include "store/coordinator.h"
#include "store/shard_file.h"

#ifndef PARTRAIN_INSTALL_WORKER
#define PARTRAIN_INSTALL_WORKER "libexec/partrain/partrain-worker"
#endif

extern char** environ;

namespace partrain::agent {
namespace {

using std::chrono::milliseconds;

// How long a node waits for the coordinator's address before it says why it may not come.
constexpr milliseconds kSlowRendezvous{30000};

std::vector<std::pair<std::string, std::string>> environment() {
  std::vector<std::pair<std::string, std::string>> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) env.emplace_back(std::string(*e, static_cast<size_t>(eq - *e)), eq + 1);
  }
  return env;
}

// The worker binary: --worker, $PARTRAIN_WORKER, <prefix>/<libexecdir>/partrain/partrain-worker
// (common/install_dir.h: relative to this program), else partrain-worker next to this program
// (the build tree's bin/). Never a path compiled in.
std::string find_worker(const std::string& given) {
  if (!given.empty()) return given;
  if (const char* e = std::getenv("PARTRAIN_WORKER"); e != nullptr && *e != '\0') return e;
  std::error_code ec;
  const std::filesystem::path installed = installed_path(PARTRAIN_INSTALL_WORKER);
  if (std::filesystem::exists(installed, ec)) return installed.string();
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (self.parent_path() / "partrain-worker").lexically_normal().string();
}

// The codes a phase's failure takes, whatever code the library it called chose: a
// configuration error exits 2; a retryable failure 75 (exit_code_for).
Status config_error(const Status& s) { return Status::invalid(s.message()); }
Status retryable(std::string_view context, const Status& s) {
  return Status::unavailable(std::string(context) + s.message());
}

// Slurm's requeue count ("0" outside Slurm or before the first requeue).
std::string slurm_restart_count() {
  const char* n = std::getenv("SLURM_RESTART_COUNT");
  return n != nullptr ? n : "0";
}

// ---- 1. The job, resolved as every worker will resolve it: config errors stop here (exit 2).

struct ResolvedJob {
  config::JobConfig job;
  Placement place;
  planner::RunAccounting acct;             // MFU: the model's FLOPs per token, one rank's peak
  std::vector<std::string> gpus;           // each local worker's CUDA_VISIBLE_DEVICES; "" = the agent's
  std::chrono::milliseconds progress_timeout{600000};  // the site config's [agent] progress_timeout
};

Result<config::JobConfig> load_job(const AgentOptions& o, config::SiteConfig* site_out) {
  Result<config::SiteConfig> site = config::load_site_config(o.site_config);
  if (!site) return site.status();
  config::apply_log_level(*site);
  *site_out = *site;
  config::Overrides ov;
  if (!o.spec.empty()) ov.spec = o.spec;
  if (o.steps > 0) ov.steps = o.steps;
  if (!o.device.empty()) ov.device = o.device;
  if (!o.resume.empty()) ov.resume = o.resume;
  Result<config::JobConfig> job = config::resolve_job(o.job_path, *site, ov);
  if (!job) return config_error(job.status());
  return job;
}

// One GPU per worker (gpu_binding.h): a cuda job on a node with too few is refused here.
// CPU jobs take the devices Slurm gave the step, when there are enough.
Result<std::vector<std::string>> bind_gpus(const config::JobConfig& job, int local_workers) {
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  const bool cuda = job.device == "cuda";
  const NodeGpus gpus = cuda || (cvd != nullptr && *cvd != '\0') ? node_gpus(cvd) : NodeGpus{};
  Result<std::vector<std::string>> visible = gpus_per_worker(gpus, local_workers, job.device, share_gpus_from_env());
  if (!visible) return config_error(visible.status());
  if (cuda) {
    log::info("agent", "{} local workers on GPUs {} ({})", visible->size(), fmt::join(*visible, ","), gpus.source);
  }
  return visible;
}

Result<ResolvedJob> resolve(const AgentOptions& o) {
  config::SiteConfig site;
  Result<config::JobConfig> job = load_job(o, &site);
  if (!job) return job.status();
  Result<Placement> place = placement_from(o, environment());
  if (!place) return config_error(place.status());
  log::set_context(job->name, place->node_name, -1);
  if (!o.standalone) resolve_node_addresses(&*place);
  // Refused here, before any worker starts, on every node: the job (config/supported.h), then
  // its plugins and pipeline schedule, loaded and checked once in a child process
  // (worker/strategies.h), so no worker forks a probe.
  PARTRAIN_RETURN_IF_ERROR(config::check_job(*job, place->world));
  Result<Layout> layout = Layout::create(place->world, job->parallelism);
  if (!layout) return config_error(layout.status());
  PARTRAIN_RETURN_IF_ERROR(worker::check_strategies(*job, *layout, site.plugin_dir));
  Result<planner::RunAccounting> acct = planner::run_accounting(job->model, job->device, o.hardware, o.hardware_dir);
  if (!acct) return config_error(acct.status());
  Result<std::vector<std::string>> gpus = bind_gpus(*job, static_cast<int>(place->node_ranks.size()));
  if (!gpus) return gpus.status();
  return ResolvedJob{std::move(job).value(), std::move(place).value(), *acct, std::move(gpus).value(),
                     std::chrono::seconds(site.progress_timeout)};
}

// ---- 2. The secret, and the rendezvous store on the coordinator node.

// The job's 0600 file under Slurm (unreadable: exit 2), a fresh one standalone; handed to
// the workers in their environment only.
Result<std::string> job_secret(const AgentOptions& o, const Placement& place) {
  if (o.standalone) return comm::generate_secret();
  Result<std::string> s = comm::load_job_secret(place.secret_file);
  if (!s) return config_error(s.status());
  return s;
}

// Node 0 runs the store (on 127.0.0.1 standalone); nullptr on the others. It binds the
// site's preferred port when that is free, else any free port, and under Slurm publishes
// the one it got in the job's state directory (coordinator_address.h). A bind that fails
// is retried; one that keeps failing exits 1, never 75: a requeue onto the same node would
// fail the same way.
Result<std::unique_ptr<comm::RendezvousServer>> start_server(const AgentOptions& o, const Placement& place,
                                                             const std::string& secret) {
  if (place.node != 0) return std::unique_ptr<comm::RendezvousServer>();
  comm::RendezvousServerOptions so;
  so.port = place.coordinator_port;
  if (o.standalone) so.host = "127.0.0.1";
  for (int attempt = 1;; ++attempt) {
    Result<std::unique_ptr<comm::RendezvousServer>> server = comm::RendezvousServer::start(secret, so);
    if (server) {
      if (!place.state_dir.empty()) {
        const std::string file = rendezvous_file(place.state_dir, place.step_id, slurm_restart_count());
        const std::string host = place.node_addr.empty() ? place.node_name : place.node_addr;
        if (Status s = publish_coordinator(file, host, (*server)->port()); !s) return config_error(s);
        log::info("agent", "rendezvous store at {}:{}, published in {}", host, (*server)->port(), file);
      }
      return server;
    }
    if (server.status().code() == StatusCode::kInvalidArgument) return config_error(server.status());
    if (so.port != 0) {
      log::warn("agent", "{}; binding any free port instead", server.status().message());
      so.port = 0;
      continue;
    }
    if (attempt >= 10) {
      return Status::internal("cannot start the rendezvous store after 10 tries: " + server.status().message());
    }
    log::warn("agent", "{}; trying again in 1 s", server.status().message());
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

// Under Slurm: this agent's marker in the state directory (a check that the folder is
// usable, and the evidence coordinator_address.h looks for when a node never shows up).
Status leave_agent_marker(const Placement& place) {
  if (place.state_dir.empty()) return Status::ok();
  if (Status s = check_state_dir(place.state_dir); !s) return s;
  const std::string marker = agent_marker(place.state_dir, place.step_id, slurm_restart_count(), place.node);
  if (Status s = leave_marker(marker); !s) return config_error(s);
  return Status::ok();
}

// Whether this node sees no marker of any other node in the job's state directory: the
// sign of a state_root that is not shared (see coordinator_address.h).
bool alone_in_state_dir(const Placement& place) {
  if (place.state_dir.empty() || place.num_nodes < 2) return false;
  std::vector<std::string> others;
  for (int n = 0; n < place.num_nodes; ++n) {
    if (n != place.node) others.push_back(agent_marker(place.state_dir, place.step_id, slurm_restart_count(), n));
  }
  return markers_seen(others) == 0;
}

// "(ext4 here)": what the state directory is on, for the messages about sharing it.
std::string kind_here(const std::string& dir) {
  const std::string kind = filesystem_kind(dir);
  return kind.empty() ? "" : fmt::format(" ({} here)", kind);
}

// After the other agents failed to show up: whether their markers are in the state
// directory. None at all: the folder is not shared between the nodes (exit 2); some: a
// node is slow or gone (exit 75).
Status not_met(const Placement& place, const std::string& what, const Status& why) {
  if (alone_in_state_dir(place)) {
    return Status::invalid(fmt::format(
        "{}, and this node ({}) sees none of the files the job's other nodes' agents write in {}{}: the site's "
        "state_root is not shared by the nodes of the allocation; set [paths] state_root in partrain.toml to a "
        "folder on storage every node mounts (mode 1777)", what, place.node_name, place.state_dir,
        kind_here(place.state_dir)));
  }
  return retryable(what + ": ", why);
}

// ---- 3. Every node's agent connects and meets the others.

struct Rendezvous {
  std::string coordinator;  // host:port, for messages
  CoordinatorAddress address;  // the store's host and port, as the workers get them
  std::string attempt;      // Slurm's restart count: the first part of every attempt's keys
  std::unique_ptr<comm::RendezvousClient> store;      // the agent's own connection
  std::unique_ptr<comm::RendezvousClient> heartbeat;  // the heartbeat thread's
};

// Where this agent finds the store: its own on the coordinator's node; elsewhere the
// address the coordinator published in the state directory (or the fixed one given).
Result<CoordinatorAddress> find_coordinator(const AgentOptions& o, const Placement& place, int own_port) {
  if (place.node == 0) return CoordinatorAddress{place.coordinator_host, own_port};
  if (place.state_dir.empty()) return CoordinatorAddress{place.coordinator_host, place.coordinator_port};
  const std::string file = rendezvous_file(place.state_dir, place.step_id, slurm_restart_count());
  // Alone after a while: say so then, not only when the timeout (300 s by default; large
  // allocations start slowly) ends the job. A coordinator merely late stays silent here:
  // the other nodes' markers are there.
  const milliseconds slow_after = std::min(kSlowRendezvous, o.rendezvous_timeout / 2);
  Result<CoordinatorAddress> a = read_coordinator(file, o.rendezvous_timeout, slow_after, [&] {
    if (!alone_in_state_dir(place)) return;
    log::warn("agent", "no coordinator's address in {} after {} s, and none of the other nodes' agents' files "
              "there{}: the site's state_root may not be shared by the nodes of the allocation; if so the job "
              "ends with exit 2 after rendezvous_timeout ({} s)", file,
              std::chrono::duration_cast<std::chrono::seconds>(slow_after).count(), kind_here(place.state_dir),
              std::chrono::duration_cast<std::chrono::seconds>(o.rendezvous_timeout).count());
  });
  if (!a && a.status().code() == StatusCode::kUnavailable) {
    return not_met(place, "the coordinator's agent did not publish its address", a.status());
  }
  if (!a) return config_error(a.status());
  log::info("agent", "rendezvous store at {}:{} (from {})", a->host, a->port, file);
  return a;
}

Result<Rendezvous> meet_agents(const AgentOptions& o, const Placement& place, int own_port,
                               const std::string& secret) {
  Result<CoordinatorAddress> at = find_coordinator(o, place, own_port);
  if (!at) return at.status();
  Rendezvous r{fmt::format("{}:{}", at->host, at->port), *at, slurm_restart_count(), nullptr, nullptr};
  // Short I/O budgets: a hung coordinator must not hold the agent past its bounded detection.
  comm::RendezvousClientOptions co;
  co.io_timeout = milliseconds(5000);
  Result<std::unique_ptr<comm::RendezvousClient>> store = comm::RendezvousClient::connect(at->host, at->port, secret, co);
  if (!store) return store.status().prefixed(fmt::format("rendezvous with {} failed: ", r.coordinator));
  r.store = std::move(store).value();
  if (Status s = r.store->barrier(rdzv_keys::agents_barrier(r.attempt), place.node, place.num_nodes, o.rendezvous_timeout); !s) {
    return not_met(place, "not every node's agent arrived", s);
  }
  comm::RendezvousClientOptions hb;
  hb.io_timeout = o.heartbeat_interval;
  Result<std::unique_ptr<comm::RendezvousClient>> hb_store =
      comm::RendezvousClient::connect(at->host, at->port, secret, hb);
  if (!hb_store) return retryable(fmt::format("heartbeat connection to {} failed: ", r.coordinator), hb_store.status());
  r.heartbeat = std::move(hb_store).value();
  return r;
}

// ---- 4. The coordinator node alone opens the state store: it picks the checkpoint each
// worker group resumes from and commits the group's saves. nullptr on the other nodes.

Result<std::unique_ptr<store::Coordinator>> open_state_store(const AgentOptions& o, const config::JobConfig& job,
                                                             const Placement& place, const Rendezvous& r) {
  if (place.node != 0) return std::unique_ptr<store::Coordinator>();
  if (std::getenv("SLURM_RESTART_COUNT") != nullptr) log::info("agent", "SLURM_RESTART_COUNT={}", r.attempt);
  store::CoordinatorOptions co = store::coordinator_options(
      job.model, job.training, job.data, store::checkpoint_root(job.checkpoint.dir, job.run_dir), job.checkpoint.keep,
      partrain::version());
  co.allow_changed_inputs = o.resume_with_changes;
  Result<std::unique_ptr<store::Coordinator>> c = open_for_resume(co, job.checkpoint.resume, first_start_of_job());
  if (!c) (void)r.store->set(rdzv_keys::job_abort(), c.status().message());  // the other nodes stop too
  return c;
}

// ---- 5. One worker per local rank: its place in the job and everything it must know.

std::vector<WorkerEnv> worker_envs(const AgentOptions& o, const ResolvedJob& rj, const Rendezvous& r,
                                   const std::string& secret) {
  const Placement& place = rj.place;
  std::vector<WorkerEnv> envs;
  for (size_t i = 0; i < place.node_ranks.size(); ++i) {
    WorkerEnv w;
    w.rank = place.node_ranks[i];
    w.local_rank = static_cast<int>(i);
    w.world = place.world;
    w.coordinator_host = r.address.host;
    w.coordinator_port = r.address.port;
    w.job_secret = secret;
    w.node_name = place.node_name;
    w.node_addr = place.node_addr;
    w.spec = rj.job.parallelism.to_string();
    // GPU nodes: worker i sees only the i-th device the step was given.
    w.cuda_visible_devices = rj.gpus[i];
    w.site_config = o.site_config;
    w.steps = o.steps;
    w.device = o.device;
    w.trace = o.trace;
    w.init = o.init;
    w.model_flops_per_token = rj.acct.model_flops_per_token;
    w.peak_flops_per_rank = rj.acct.peak_flops_per_rank;
    envs.push_back(std::move(w));
  }
  return envs;
}

// The workers of attempt `prefix` ("a0.1"): each one's environment with that attempt's keys.
std::vector<WorkerSpec> worker_specs(std::vector<WorkerEnv> envs, const std::string& prefix) {
  std::vector<WorkerSpec> specs;
  for (WorkerEnv& e : envs) {
    e.attempt = prefix;
    specs.push_back(WorkerSpec{.rank = e.rank, .local_rank = e.local_rank, .env = to_env(e)});
  }
  return specs;
}

// ---- 6. Worker groups, one per attempt, until one ends without an in-job restart.

// The coordinator's part of attempt `prefix`: publish the checkpoint the group resumes
// from (PREFIX/resume) and commit its saves. nullptr on the other nodes.
Result<std::unique_ptr<CheckpointCommitter>> start_committer(store::Coordinator* state, const ResolvedJob& rj,
                                                             const Rendezvous& r, const std::string& prefix) {
  if (state == nullptr) return std::unique_ptr<CheckpointCommitter>();
  const config::JobConfig& job = rj.job;
  Result<std::optional<store::Checkpoint>> resume = state->resume_point();
  if (!resume) return resume.status();
  if (*resume) {
    log::info("agent", "workers resume at step {} from {}/{}", (*resume)->state.step,
              store::checkpoint_root(job.checkpoint.dir, job.run_dir), store::step_folder((*resume)->state.step));
  }
  (void)r.store->set(rdzv_keys::resume(rdzv_keys::attempt_scope(prefix)), *resume ? store::encode_checkpoint(**resume) : "none");
  Result<std::unique_ptr<comm::RendezvousClient>> client = r.store->clone();
  if (!client) return retryable("cannot open the checkpoint committer's store connection: ", client.status());
  return std::make_unique<CheckpointCommitter>(std::move(client).value(), state, rdzv_keys::attempt_scope(prefix), rj.place.world);
}

Result<GroupEnd> run_worker_groups(const AgentOptions& o, const ResolvedJob& rj, const Rendezvous& r,
                                   store::Coordinator* state, const std::vector<WorkerEnv>& envs,
                                   const Heartbeat& heartbeat) {
  const std::string worker = find_worker(o.worker_path);
  const int max_restarts = rj.job.checkpoint.max_restarts;
  for (int restarts = 0;; ++restarts) {
    // This attempt's keys: Slurm's restart count and the in-job restart.
    const std::string prefix = rdzv_keys::attempt(r.attempt, restarts);
    const std::vector<WorkerSpec> specs = worker_specs(envs, prefix);
    Result<std::unique_ptr<CheckpointCommitter>> committer = start_committer(state, rj, r, prefix);
    if (!committer) return committer.status();
    WorkerGroup group;
    if (Status s = group.spawn(worker, {o.job_path}, specs); !s) return retryable("", s);
    for (const auto& [rank, pid] : group.pids()) log::info("agent", "rank {} started: pid {} ({})", rank, pid, worker);
    const SuperviseContext context{.store = r.store.get(),
                                   .heartbeat = &heartbeat,
                                   .finished_prefix = rdzv_keys::attempt_scope(prefix),
                                   .node = rj.place.node,
                                   .num_nodes = rj.place.num_nodes,
                                   .restarts = restarts,
                                   .max_restarts = max_restarts,
                                   .stop_grace = o.stop_grace,
                                   .progress_timeout = rj.progress_timeout};
    Result<GroupEnd> end = supervise(group, context);
    if (*committer) (*committer)->stop();
    if (!end || *end != GroupEnd::kRestart) return end;
    // Every node's group is down before any starts again.
    if (rj.place.num_nodes > 1) {
      const std::string barrier = rdzv_keys::restart_barrier(restarts + 1);
      if (Status s = r.store->barrier(barrier, rj.place.node, rj.place.num_nodes, milliseconds(300000)); !s) {
        return retryable("not every node's agent came back for the restart: ", s);
      }
    }
    log::warn("agent", "restarting the worker group from the newest checkpoint (restart {} of {})", restarts + 1,
              max_restarts);
  }
}

// ---- 7. Done: tell the coordinator, which keeps the store up until every node said so
// (or the heartbeat timeout passed). Best effort: a store that is gone has no one to tell.

void say_done(const AgentOptions& o, const Placement& place, const Rendezvous& r, bool coordinator) {
  (void)r.store->set(rdzv_keys::done(place.node), "1");
  if (coordinator) {
    std::vector<std::string> keys;
    for (int n = 0; n < place.num_nodes; ++n) keys.push_back(rdzv_keys::done(n));
    (void)r.store->wait(keys, o.heartbeat_timeout);
  }
  log::info("agent", "all {} local ranks finished", place.node_ranks.size());
}

Result<GroupEnd> run(const AgentOptions& o) {
  Result<ResolvedJob> rj = resolve(o);
  if (!rj) return rj.status();
  const Placement& place = rj->place;
  PARTRAIN_RETURN_IF_ERROR(leave_agent_marker(place));
  Result<std::string> secret = job_secret(o, place);
  if (!secret) return secret.status();
  Result<std::unique_ptr<comm::RendezvousServer>> server = start_server(o, place, *secret);
  if (!server) return server.status();
  Result<Rendezvous> r = meet_agents(o, place, *server ? (*server)->port() : 0, *secret);
  if (!r) return r.status();
  Result<std::unique_ptr<store::Coordinator>> state = open_state_store(o, rj->job, place, *r);
  if (!state) return state.status();
  const std::vector<WorkerEnv> envs = worker_envs(o, *rj, *r, *secret);
  (void)install_stop_signal();
  const Heartbeat heartbeat(std::move(r->heartbeat), place.node, place.num_nodes, o.heartbeat_interval,
                            o.heartbeat_timeout);
  Result<GroupEnd> end = run_worker_groups(o, *rj, *r, state->get(), envs, heartbeat);
  if (end && *end == GroupEnd::kFinished) say_done(o, place, *r, *server != nullptr);
  return end;
}

}  // namespace

int run_agent(const AgentOptions& options) {
  int code = kExitFailure;
  bool graceful = false;  // a stop the ranks agreed on (SIGTERM, scontrol requeue): no failure
  try {
    // The one place a failure becomes an exit code, with its one line.
    const Result<GroupEnd> end = run(options);
    if (!end) log::error("agent", "{}", end.status().message());
    code = !end ? exit_code_for(end.status()) : *end == GroupEnd::kFinished ? kExitOk : kExitRetryable;
    graceful = end && *end == GroupEnd::kStopped;
  } catch (const std::exception& e) {
    log::error("agent", "internal error: {}", e.what());
  }
  // The code Slurm's RequeueExit= sees, said once with what it means (partraind(8)).
  if (code == kExitOk) {
    log::info("agent", "exit 0: done");
  } else if (code == kExitRetryable && graceful) {
    log::info("agent", "exit {}: stopped at a step boundary as asked; a --requeue job is requeued "
              "(RequeueExit=75)", code);
  } else if (code == kExitRetryable) {
    log::warn("agent", "exit {}: retryable; a --requeue job is requeued (RequeueExit=75)", code);
  } else if (code == kExitUsage) {
    log::error("agent", "exit {}: configuration error; fix it and resubmit (never requeued)", code);
  } else {
    log::error("agent", "exit {}: failure", code);
  }
  return code;
}

}  // namespace partrain::agent
