// The agent's life: resolve the job, rendezvous, spawn, supervise, tear down. See agent.h.
#include "agent/agent.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "agent/checkpoint_committer.h"
#include "agent/gpu_binding.h"
#include "agent/supervisor.h"
#include "common/exit_codes.h"
#include "comm/rendezvous/secret.h"
#include "comm/rendezvous/client.h"
#include "comm/rendezvous/server.h"
#include "common/log.h"
#include "common/stop_signal.h"
#include "config/job_config.h"
#include "config/site_config.h"
#include "config/supported.h"
#include "layout/layout.h"
#include "planner/run_accounting.h"
#include "store/coordinator.h"
#include "store/shard_file.h"

#ifndef PARTRAIN_VERSION
#define PARTRAIN_VERSION "unknown"
#endif

extern char** environ;

namespace partrain::agent {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::vector<std::pair<std::string, std::string>> environment() {
  std::vector<std::pair<std::string, std::string>> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) env.emplace_back(std::string(*e, static_cast<size_t>(eq - *e)), eq + 1);
  }
  return env;
}

// The worker binary: --worker, $PARTRAIN_WORKER, <bindir>/../libexec/partrain/partrain-worker,
// partrain-worker next to this program, or the build tree's.
std::string find_worker(const std::string& given) {
  if (!given.empty()) return given;
  if (const char* e = std::getenv("PARTRAIN_WORKER"); e != nullptr && *e != '\0') return e;
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::filesystem::path dir = self.parent_path();
  for (const auto& p : {dir / "../libexec/partrain/partrain-worker", dir / "partrain-worker"}) {
    if (std::filesystem::exists(p, ec)) return p.lexically_normal().string();
  }
#ifdef PARTRAIN_BUILD_WORKER
  if (std::filesystem::exists(PARTRAIN_BUILD_WORKER, ec)) return PARTRAIN_BUILD_WORKER;
#endif
  return (dir / "partrain-worker").string();
}

// Heartbeats: every interval this agent bumps hb/<node> and reads the others'. A peer whose
// counter stops moving for `timeout`, a store that stops answering for as long, or an
// abort key set by another agent makes `failure()` non-empty.
class Heartbeat {
 public:
  Heartbeat(std::unique_ptr<comm::RendezvousClient> store, int node, int num_nodes, milliseconds interval,
            milliseconds timeout)
      : store_(std::move(store)), node_(node), num_nodes_(num_nodes), interval_(interval),
        timeout_(timeout), thread_([this] { loop(); }) {}
  ~Heartbeat() {
    stop_.store(true);
    thread_.join();
  }
  std::string failure() {
    std::lock_guard<std::mutex> lock(mu_);
    return failure_;
  }

 private:
  void fail(std::string why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.empty()) failure_ = std::move(why);
  }
  void loop() {
    std::vector<int64_t> seen(static_cast<size_t>(num_nodes_), -1);
    std::vector<Clock::time_point> changed(static_cast<size_t>(num_nodes_), Clock::now());
    Clock::time_point last_ok = Clock::now();
    while (!stop_.load()) {
      bool ok = store_->add(fmt::format("hb/{}", node_), 1).is_ok();
      for (int n = 0; n < num_nodes_ && ok; ++n) {
        if (n == node_) continue;
        Result<int64_t> v = store_->add(fmt::format("hb/{}", n), 0);
        ok = v.is_ok();
        if (!ok) break;
        if (*v != seen[static_cast<size_t>(n)]) {
          seen[static_cast<size_t>(n)] = *v;
          changed[static_cast<size_t>(n)] = Clock::now();
        } else if (Clock::now() - changed[static_cast<size_t>(n)] > timeout_) {
          // A node that finished its ranks stops heartbeating; that is no loss.
          Result<bool> done = store_->check({fmt::format("done/{}", n)});
          if (done && *done) continue;
          fail(fmt::format("peer node {} lost: no heartbeat for {} s", n,
                           std::chrono::duration_cast<std::chrono::seconds>(timeout_).count()));
        }
      }
      if (ok) {
        Result<bool> aborted = store_->check({"job/abort"});
        if (aborted && *aborted) {
          Result<std::string> why = store_->get("job/abort", milliseconds(1000));
          fail("another node aborted the job: " + (why ? *why : std::string("?")));
        }
        last_ok = Clock::now();
      } else if (Clock::now() - last_ok > timeout_) {
        fail(fmt::format("the coordinator's store stopped answering for {} s",
                         std::chrono::duration_cast<std::chrono::seconds>(timeout_).count()));
      }
      for (auto t = Clock::now(); !stop_.load() && Clock::now() - t < interval_;) {
        std::this_thread::sleep_for(milliseconds(20));
      }
    }
  }

  std::unique_ptr<comm::RendezvousClient> store_;
  int node_, num_nodes_;
  milliseconds interval_, timeout_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::string failure_;
  std::thread thread_;
};

// The agent's exit code for a worker that ended badly (see agent.h).
int exit_code_for_worker(const WorkerExit& e) {
  if (e.signaled) return kExitRetryable;  // killed: the node or a peer failed
  if (e.code == kExitUsage || e.code == kExitRetryable) return e.code;
  return kExitFailure;  // a bug or a diverged run: requeueing would not help
}

int run(const AgentOptions& o) {
  // The job, resolved as every worker will resolve it: config errors stop here (exit 2).
  Result<config::SiteConfig> site = config::load_site_config(o.site_config);
  if (!site) {
    log::error("agent", "{}", site.status().message());
    return exit_code_for(site.status());
  }
  config::apply_log_level(*site);
  config::Overrides ov;
  if (!o.spec.empty()) ov.spec = o.spec;
  if (o.steps > 0) ov.steps = o.steps;
  if (!o.device.empty()) ov.device = o.device;
  Result<config::JobConfig> job = config::resolve_job(o.job_path, *site, ov);
  if (!job) {
    log::error("agent", "{}", job.status().message());
    return kExitUsage;
  }
  Result<Placement> place = placement_from(o, environment());
  if (!place) {
    log::error("agent", "{}", place.status().message());
    return kExitUsage;
  }
  log::set_context(job->name, place->node_name, -1);
  if (!o.standalone) resolve_node_addresses(&*place);
  Result<Layout> layout = Layout::create(place->world, job->parallelism);
  if (!layout) {
    log::error("agent", "{}", layout.status().message());
    return kExitUsage;
  }
  if (Result<int> ga = config::grad_accum_steps(*job, layout->dp()); !ga) {
    log::error("agent", "{}", ga.status().message());
    return kExitUsage;
  }
  // The layout against the model (heads, kv_heads, hidden, seq_len % tp, ...): refused here,
  // before any worker starts, on every node (`partrain run --nproc` checks it first too, to
  // print the one line alone).
  if (Status s = config::validate_layout(*job, place->world); !s) {
    log::error("agent", "{}", s.message());
    return kExitUsage;
  }
  // What this version runs, decided once here rather than by every worker (config/supported.h).
  if (Status s = config::check_supported(*job, *layout); !s) {
    log::error("agent", "{}", s.message());
    return kExitUsage;
  }
  // MFU: the model's FLOPs per token and one rank's peak, handed to the workers.
  Result<planner::RunAccounting> acct = planner::run_accounting(job->model, job->device, o.hardware);
  if (!acct) {
    log::error("agent", "{}", acct.status().message());
    return kExitUsage;
  }
  // One GPU per worker (gpu_binding.h): a cuda job on a node with too few is refused here.
  // CPU jobs take the devices Slurm gave the step, when there are enough.
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  const bool cuda = job->device == "cuda";
  const NodeGpus node_gpu_list = cuda || (cvd != nullptr && *cvd != '\0') ? node_gpus(cvd) : NodeGpus{};
  Result<std::vector<std::string>> visible =
      gpus_per_worker(node_gpu_list, static_cast<int>(place->node_ranks.size()), job->device);
  if (!visible) {
    log::error("agent", "{}", visible.status().message());
    return kExitUsage;
  }
  if (cuda) {
    log::info("agent", "{} local workers on GPUs {} ({})", visible->size(), fmt::join(*visible, ","),
              node_gpu_list.source);
  }
  // The secret: the job's 0600 file under Slurm, a fresh one standalone (handed to the
  // workers in their environment only).
  std::string secret;
  if (o.standalone) {
    Result<std::string> s = comm::generate_secret();
    if (!s) return kExitFailure;
    secret = *s;
  } else {
    Result<std::string> s = comm::load_job_secret(place->secret_file);
    if (!s) {
      log::error("agent", "{}", s.status().message());
      return kExitUsage;
    }
    secret = *s;
  }
  // The coordinator node runs the store.
  std::unique_ptr<comm::RendezvousServer> server;
  int port = place->coordinator_port;
  if (place->node == 0) {
    comm::RendezvousServerOptions so;
    so.port = port;
    if (o.standalone) so.host = "127.0.0.1";
    Result<std::unique_ptr<comm::RendezvousServer>> srv = comm::RendezvousServer::start(secret, so);
    if (!srv) {
      log::error("agent", "cannot start the rendezvous store: {}", srv.status().message());
      return kExitRetryable;
    }
    server = std::move(srv).value();
    port = server->port();
  }
  // Short I/O budgets: a hung coordinator must not hold the agent past its bounded detection.
  comm::RendezvousClientOptions co;
  co.io_timeout = milliseconds(5000);
  Result<std::unique_ptr<comm::RendezvousClient>> store =
      comm::RendezvousClient::connect(place->coordinator_host, port, secret, co);
  if (!store) {
    log::error("agent", "rendezvous with {}:{} failed: {}", place->coordinator_host, port,
               store.status().message());
    return exit_code_for(store.status());
  }
  const std::string attempt = std::getenv("SLURM_RESTART_COUNT") != nullptr ? std::getenv("SLURM_RESTART_COUNT") : "0";
  if (Status s = (*store)->barrier("agents/" + attempt, place->node, place->num_nodes, milliseconds(300000)); !s) {
    log::error("agent", "not every node's agent arrived: {}", s.message());
    return kExitRetryable;
  }
  comm::RendezvousClientOptions hb_options;
  hb_options.io_timeout = o.heartbeat_interval;
  Result<std::unique_ptr<comm::RendezvousClient>> hb_store =
      comm::RendezvousClient::connect(place->coordinator_host, port, secret, hb_options);
  if (!hb_store) return kExitRetryable;

  // The coordinator node alone opens the state store: it picks the checkpoint each worker
  // group resumes from and commits the group's saves.
  std::unique_ptr<store::Coordinator> state;
  const std::string ckpt_root = store::checkpoint_root(job->checkpoint.dir, job->run_dir);
  if (place->node == 0) {
    if (std::getenv("SLURM_RESTART_COUNT") != nullptr) log::info("agent", "SLURM_RESTART_COUNT={}", attempt);
    Result<std::unique_ptr<store::Coordinator>> c = store::Coordinator::open(store::coordinator_options(
        job->model, job->training, ckpt_root, job->checkpoint.keep, PARTRAIN_VERSION));
    if (!c) {
      log::error("agent", "{}", c.status().message());
      (void)(*store)->set("job/abort", c.status().message());
      return c.status().code() == StatusCode::kInvalidArgument ? kExitUsage : exit_code_for(c.status());
    }
    state = std::move(c).value();
  }

  // Workers.
  const std::string worker = find_worker(o.worker_path);
  std::vector<WorkerSpec> specs;
  const std::string coordinator = fmt::format("{}:{}", place->coordinator_host, port);
  for (size_t i = 0; i < place->node_ranks.size(); ++i) {
    WorkerSpec w;
    w.rank = place->node_ranks[i];
    w.local_rank = static_cast<int>(i);
    w.env = {{"PARTRAIN_RANK", std::to_string(w.rank)},
             {"PARTRAIN_LOCAL_RANK", std::to_string(i)},
             {"PARTRAIN_WORLD", std::to_string(place->world)},
             {"PARTRAIN_COORDINATOR", coordinator},
             {"PARTRAIN_JOB_SECRET", secret},
             {"PARTRAIN_NODE_NAME", place->node_name},
             {"PARTRAIN_NODE_ADDR", place->node_addr},
             {"PARTRAIN_SPEC", job->parallelism.to_string()}};
    // GPU nodes: worker i sees only the i-th device the step was given.
    if (!(*visible)[i].empty()) w.env.emplace_back("CUDA_VISIBLE_DEVICES", (*visible)[i]);
    if (!o.site_config.empty()) w.env.emplace_back("PARTRAIN_SITE_CONFIG", o.site_config);
    if (o.steps > 0) w.env.emplace_back("PARTRAIN_STEPS", std::to_string(o.steps));
    if (!o.device.empty()) w.env.emplace_back("PARTRAIN_DEVICE", o.device);
    if (!o.trace.empty()) w.env.emplace_back("PARTRAIN_TRACE", o.trace);
    w.env.emplace_back("PARTRAIN_MODEL_FLOPS_PER_TOKEN", fmt::format("{}", acct->model_flops_per_token));
    w.env.emplace_back("PARTRAIN_PEAK_FLOPS_PER_RANK", fmt::format("{}", acct->peak_flops_per_rank));
    specs.push_back(std::move(w));
  }
  (void)install_stop_signal();

  Heartbeat heartbeat(std::move(hb_store).value(), place->node, place->num_nodes,
                      o.heartbeat_interval, o.heartbeat_timeout);
  int code = kExitOk;
  for (int restart_count = 0;; ++restart_count) {
    // This attempt's keys: Slurm's restart count and the in-job restart.
    const std::string prefix = fmt::format("a{}.{}", attempt, restart_count);
    for (WorkerSpec& w : specs) {
      std::erase_if(w.env, [](const auto& kv) { return kv.first == "PARTRAIN_ATTEMPT"; });
      w.env.emplace_back("PARTRAIN_ATTEMPT", prefix);
    }
    std::unique_ptr<CheckpointCommitter> committer;
    if (state) {
      Result<std::optional<store::Checkpoint>> resume = state->resume_point();
      if (!resume) {
        log::error("agent", "{}", resume.status().message());
        return exit_code_for(resume.status());
      }
      if (*resume) {
        log::info("agent", "workers resume at step {} from {}/{}", (*resume)->state.step, ckpt_root,
                  store::step_folder((*resume)->state.step));
      }
      (void)(*store)->set(prefix + "/resume", *resume ? store::encode_checkpoint(**resume) : "none");
      Result<std::unique_ptr<comm::RendezvousClient>> cc = (*store)->clone();
      if (!cc) return kExitRetryable;
      committer = std::make_unique<CheckpointCommitter>(std::move(cc).value(), state.get(), prefix + "/",
                                                        place->world);
    }
    WorkerGroup group;
    if (Status s = group.spawn(worker, {o.job_path}, specs); !s) {
      log::error("agent", "{}", s.message());
      return kExitRetryable;
    }
    for (const auto& [rank, pid] : group.pids()) log::info("agent", "rank {} started: pid {} ({})", rank, pid, worker);

    // Supervise until every worker ended well, or anything failed.
    code = kExitOk;
    Clock::time_point stop_sent{};
    bool stopping = false;
    bool restart = false;
    int polls = 0;
    const std::string restart_key = fmt::format("restart/{}", restart_count + 1);
    // Kills the local workers, then tells the other nodes (unless the store is what failed).
    auto abort_job = [&](const std::string& why, int exit_code, bool tell_others = true) {
      log::error("agent", "{}; stopping every worker of this node", why);
      group.kill_all();
      if (tell_others) (void)(*store)->set("job/abort", fmt::format("node {}: {}", place->node, why));
      code = exit_code;
    };
    while (group.running() > 0) {
      std::vector<WorkerExit> ended = group.poll();
      // A rank that fails without SIGKILL often only lost a peer: give the peer's own death a
      // moment to be reaped, so the log names the cause, not the echo.
      const auto is_echo = [](const WorkerExit& e) {
        return e.signaled ? e.code != SIGKILL : e.code != 0;
      };
      if (!stopping && std::any_of(ended.begin(), ended.end(), is_echo)) {
        std::this_thread::sleep_for(milliseconds(200));
        for (const WorkerExit& e : group.poll()) ended.push_back(e);
      }
      // SIGKILL (kill -9, the OOM killer) first, then other signals, then exit codes: the
      // first bad exit is taken as the cause, and every one is logged.
      const auto priority = [](const WorkerExit& e) { return e.signaled ? (e.code == SIGKILL ? 0 : 1) : 2; };
      std::stable_sort(ended.begin(), ended.end(), [&priority](const WorkerExit& a, const WorkerExit& b) {
        return priority(a) < priority(b);
      });
      std::string cause;
      int cause_code = kExitOk;
      for (const WorkerExit& e : ended) {
        if (!e.signaled && e.code == 0) {
          log::info("agent", "rank {} (pid {}) finished", e.rank, e.pid);
          continue;
        }
        if (stopping && !e.signaled && e.code == kExitRetryable) {
          log::info("agent", "rank {} (pid {}) stopped at a step boundary", e.rank, e.pid);
          code = kExitRetryable;
          continue;
        }
        const std::string what = fmt::format("rank {} (pid {}) died: {}", e.rank, e.pid, e.describe());
        if (cause.empty()) {
          cause = what;
          cause_code = exit_code_for_worker(e);
        } else {
          log::error("agent", "{}", what);
        }
      }
      if (!cause.empty()) {
        // A worker that was killed (or lost a peer) is replaced, with every node's group,
        // from the newest checkpoint, up to [checkpoint] max_restarts times: this agent asks
        // the others through the store (restart/N) instead of aborting the job.
        restart = cause_code == kExitRetryable && !stopping && restart_count < job->checkpoint.max_restarts;
        abort_job(cause, cause_code, !restart);
        if (restart) (void)(*store)->set(restart_key, fmt::format("node {}: {}", place->node, cause));
        break;
      }
      // Another node asked for a restart: this node's group goes down too.
      if (++polls % 10 == 0 && place->num_nodes > 1 && !stopping && restart_count < job->checkpoint.max_restarts) {
        Result<bool> asked = (*store)->check({restart_key});
        if (asked && *asked) {
          Result<std::string> why = (*store)->get(restart_key, milliseconds(1000));
          log::warn("agent", "restart requested by {}", why ? *why : std::string("another node"));
          group.kill_all();
          code = kExitRetryable;
          restart = true;
          break;
        }
      }
      if (group.running() == 0) break;
      if (const int sig = take_stop_signal(); sig != 0 && !stopping) {
        log::warn("agent", "{} received: workers stop at the next step boundary", sigabbrev_np(sig));
        group.signal_all(SIGTERM);
        stopping = true;
        stop_sent = Clock::now();
      }
      if (stopping && Clock::now() - stop_sent > o.stop_grace) {
        abort_job("workers did not stop within the grace period", kExitRetryable);
        break;
      }
      if (std::string why = heartbeat.failure(); !why.empty()) {
        abort_job(why, kExitRetryable, why.find("store stopped answering") == std::string::npos);
        break;
      }
      std::this_thread::sleep_for(milliseconds(50));
    }
    if (committer) committer->stop();
    if (!restart) break;
    // Every node's group is down before any starts again.
    if (place->num_nodes > 1) {
      if (Status s = (*store)->barrier(restart_key + "/agents", place->node, place->num_nodes, milliseconds(300000)); !s) {
        log::error("agent", "not every node's agent came back for the restart: {}", s.message());
        return kExitRetryable;
      }
    }
    log::warn("agent", "restarting the worker group from the newest checkpoint (restart {} of {})",
              restart_count + 1, job->checkpoint.max_restarts);
  }
  // Done: tell the coordinator, which keeps the store up until every node said so.
  if (code == kExitOk) {
    (void)(*store)->set(fmt::format("done/{}", place->node), "1");
    if (server) {
      std::vector<std::string> keys;
      for (int n = 0; n < place->num_nodes; ++n) keys.push_back(fmt::format("done/{}", n));
      (void)(*store)->wait(keys, o.heartbeat_timeout);
    }
    log::info("agent", "all {} local ranks finished", place->node_ranks.size());
  }
  return code;
}

}  // namespace

int run_agent(const AgentOptions& options) {
  int code = kExitFailure;
  try {
    code = run(options);
  } catch (const std::exception& e) {
    log::error("agent", "internal error: {}", e.what());
  }
  // The code Slurm's RequeueExit= sees, said once with what it means (partraind(8)).
  if (code == kExitOk) {
    log::info("agent", "exit 0: done");
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
