// See supervise.h.
#include "agent/supervise.h"

#include <signal.h>

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "agent/progress_watch.h"
#include "comm/rendezvous/keys.h"
#include "common/exit_codes.h"
#include "common/log.h"
#include "common/proc_stat.h"
#include "common/stop_signal.h"

namespace partrain::agent {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Whether a local worker is stopped (SIGSTOP, a debugger) or in uninterruptible sleep (a
// hung file system), from the state field of /proc/PID/stat: the watchdog's first suspect.
bool stopped_or_blocked(pid_t pid) {
  const std::vector<std::string> f = proc_stat_fields(pid);
  return !f.empty() && (f[0] == "T" || f[0] == "t" || f[0] == "D");
}

// A bad exit: what to log, and the agent's exit code for it.
struct Cause {
  std::string what;
  int code = kExitFailure;
};

// One group's supervise loop; see supervise.h for what it watches and in what order.
class Supervision {
 public:
  Supervision(WorkerGroup& group, const SuperviseContext& c)
      : group_(group), c_(c), restart_key_(rdzv_keys::restart(c.restarts + 1)), watch_(pipes(group)) {}

  Result<GroupEnd> run() {
    while (group_.running() > 0) {
      if (std::optional<Cause> cause = judge(reap())) return end_with(*cause);
      if (restart_requested()) {
        group_.kill_all();
        return GroupEnd::kRestart;
      }
      if (group_.running() == 0) break;
      forward_stop_signal();
      if (kill_at_ && Clock::now() >= *kill_at_) return kill_unstopped();
      if (std::optional<HeartbeatFailure> f = c_.heartbeat->failure()) {
        return abort({f->why, kExitRetryable}, !f->store_lost);
      }
      if (std::optional<Cause> stall = no_progress()) return end_with(*stall);
      std::this_thread::sleep_for(milliseconds(50));
    }
    return stopped_ ? GroupEnd::kStopped : GroupEnd::kFinished;
  }

 private:
  bool restarts_left() const { return c_.restarts < c_.max_restarts; }

  // Whether a rank that exited 0 reported, through the store, that its run reached the end.
  bool reported_finished(int rank) {
    if (c_.store == nullptr) return false;
    Result<bool> there = c_.store->check({rdzv_keys::finished(c_.finished_prefix, rank)});
    return there && *there;
  }
  bool early_exit(const WorkerExit& e) const { return !e.signaled && e.code == 0 && early_.count(e.pid) > 0; }

  // The workers that ended since the last call, the likeliest cause first.
  std::vector<WorkerExit> reap() {
    std::vector<WorkerExit> ended = group_.poll();
    // A rank that fails without SIGKILL often only lost a peer: give the peer's own death a
    // moment to be reaped, so the log names the cause, not the echo.
    const auto is_echo = [](const WorkerExit& e) { return e.signaled ? e.code != SIGKILL : e.code != 0; };
    if (!stopping_ && std::any_of(ended.begin(), ended.end(), is_echo)) {
      std::this_thread::sleep_for(milliseconds(200));
      for (const WorkerExit& e : group_.poll()) ended.push_back(e);
    }
    // Exits 0 without the end reported, those reaped in that moment too (a peer's echo can be
    // reaped before the early exit it echoes).
    for (const WorkerExit& e : ended) {
      if (!e.signaled && e.code == 0 && !reported_finished(e.rank)) early_.insert(e.pid);
    }
    // SIGKILL (kill -9, the OOM killer) first, then other signals and exits 0 before the
    // end (a process that ended itself), then exit codes.
    const auto priority = [this](const WorkerExit& e) {
      return e.signaled ? (e.code == SIGKILL ? 0 : 1) : early_exit(e) ? 1 : 2;
    };
    std::stable_sort(ended.begin(), ended.end(),
                     [&priority](const WorkerExit& a, const WorkerExit& b) { return priority(a) < priority(b); });
    return ended;
  }

  // Logs every ended rank but the cause; the first bad exit is the cause.
  std::optional<Cause> judge(const std::vector<WorkerExit>& ended) {
    std::optional<Cause> cause;
    for (const WorkerExit& e : ended) {
      if (!e.signaled && e.code == 0 && !early_exit(e)) {
        log::info("agent", "rank {} (pid {}) finished", e.rank, e.pid);
        continue;
      }
      if (early_exit(e)) {
        const std::string what = fmt::format(
            "rank {} (pid {}) exited 0 before its run reached the last step (it never reported the end through the "
            "rendezvous: a plugin or library that called exit()?); the job resumes from its newest checkpoint",
            e.rank, e.pid);
        if (!cause) {
          cause = Cause{what, kExitRetryable};
        } else {
          log::error("agent", "{}", what);
        }
        continue;
      }
      if (stopping_ && !e.signaled && e.code == kExitRetryable) {
        log::info("agent", "rank {} (pid {}) stopped at a step boundary", e.rank, e.pid);
        stopped_ = true;
        continue;
      }
      const std::string what = fmt::format("rank {} (pid {}) died: {}", e.rank, e.pid, e.describe());
      if (!cause) {
        cause = Cause{what, exit_code_for_worker(e)};
      } else {
        log::error("agent", "{}", what);
      }
    }
    return cause;
  }

  // A killed worker (or one that lost a peer) is replaced, with every node's group, from
  // the newest checkpoint while restarts are left: this agent asks the others through the
  // store (restart/N) instead of aborting the job.
  Result<GroupEnd> end_with(const Cause& cause) {
    if (cause.code != kExitRetryable || stopping_ || !restarts_left()) return abort(cause, true);
    log::error("agent", "{}; stopping every worker of this node", cause.what);
    group_.kill_all();
    (void)c_.store->set(restart_key_, fmt::format("node {}: {}", c_.node, cause.what));
    return GroupEnd::kRestart;
  }

  // Kills the local workers, then tells the other nodes (unless the store is what failed).
  Status abort(const Cause& cause, bool tell_others) {
    group_.kill_all();
    if (tell_others) (void)c_.store->set(rdzv_keys::job_abort(), fmt::format("node {}: {}", c_.node, cause.what));
    return status_for_exit_code(cause.code, cause.what + "; stopping every worker of this node");
  }

  // Another node asked for a restart: this node's group goes down too.
  bool restart_requested() {
    if (++polls_ % 10 != 0 || c_.num_nodes <= 1 || stopping_ || !restarts_left()) return false;
    Result<bool> asked = c_.store->check({restart_key_});
    if (!asked || !*asked) return false;
    Result<std::string> why = c_.store->get(restart_key_, milliseconds(1000));
    log::warn("agent", "restart requested by {}", why ? *why : std::string("another node"));
    return true;
  }

  static std::vector<std::pair<int, int>> pipes(const WorkerGroup& g) {
    std::vector<std::pair<int, int>> out;
    for (size_t i = 0; i < g.pids().size(); ++i) {
      out.emplace_back(g.pids()[i].first, i < g.progress_fds().size() ? g.progress_fds()[i] : -1);
    }
    return out;
  }

  // The watchdog: a running rank silent for longer than progress_timeout.
  std::optional<Cause> no_progress() {
    if (c_.progress_timeout.count() <= 0) return std::nullopt;
    const Clock::time_point now = Clock::now();
    watch_.drain(now);
    std::optional<ProgressWatch::Stall> s = watch_.stalled(
        c_.progress_timeout, [this](size_t i) { return group_.alive(i); }, now,
        [this](size_t i) { return stopped_or_blocked(group_.pids()[i].second); });
    if (!s) return std::nullopt;
    return Cause{fmt::format("rank {} made no progress for {} s (step {}, {}): {}; [agent] progress_timeout is {} s",
                             s->rank, std::chrono::duration_cast<std::chrono::seconds>(s->silent).count(), s->step,
                             s->phase,
                             s->waiting ? "it waits in a collective for a peer that is stopped or hung"
                                        : "it is stopped or hung, or waits for a peer that is",
                             std::chrono::duration_cast<std::chrono::seconds>(c_.progress_timeout).count()),
                 kExitRetryable};
  }

  // The first stop signal is forwarded to every worker; the first SIGTERM, SIGINT or SIGHUP
  // (Slurm's SIGKILL follows its SIGTERM by KillWait) starts the grace. SIGUSR1, the time
  // limit's early warning, starts none: a save may take its SECONDS.
  void forward_stop_signal() {
    const int sig = take_stop_signal();
    if (sig == 0) return;
    const bool deadline = sig != SIGUSR1 && !kill_at_;
    if (!stopping_) {
      log::warn("agent", "{} received{}: workers save and stop at the next step boundary{}", sigabbrev_np(sig),
                sig == SIGUSR1 ? " (the time limit is near: sbatch --signal=USR1@SECONDS)" : "",
                deadline ? fmt::format(" (those still running in {:g} s are killed)", seconds(c_.stop_grace)) : "");
      group_.signal_all(SIGTERM);
      stopping_ = true;
    } else if (deadline) {
      log::warn("agent", "{} received: workers still running in {:g} s are killed", sigabbrev_np(sig),
                seconds(c_.stop_grace));
    }
    if (deadline) kill_at_ = Clock::now() + c_.stop_grace;
  }

  static double seconds(milliseconds d) { return std::chrono::duration<double>(d).count(); }

  // The grace after SIGTERM passed: the ranks still running ignored it (SIGTERM only asks for
  // a stop at the next step boundary, which a rank hung in a collective or in a plugin never
  // reaches, nor its peers waiting for it). One line names them; the group is killed.
  Status kill_unstopped() {
    std::vector<std::string> ranks;
    std::vector<std::string> pids;
    for (size_t i = 0; i < group_.pids().size(); ++i) {
      if (!group_.alive(i)) continue;
      ranks.push_back(std::to_string(group_.pids()[i].first));
      pids.push_back(std::to_string(group_.pids()[i].second));
    }
    const bool one = ranks.size() == 1;
    return abort({fmt::format("{} {} (pid{} {}) did not stop within {:g} s of SIGTERM (hung in a collective or in a "
                              "plugin?): killed with SIGKILL",
                              one ? "rank" : "ranks", fmt::join(ranks, ", "), one ? "" : "s", fmt::join(pids, ", "),
                              seconds(c_.stop_grace)),
                  kExitRetryable},
                 true);
  }

  WorkerGroup& group_;
  const SuperviseContext& c_;
  const std::string restart_key_;
  bool stopping_ = false;  // SIGTERM forwarded
  bool stopped_ = false;   // a rank stopped at a step boundary
  std::optional<Clock::time_point> kill_at_;  // the end of the grace: the ranks still running are killed
  int polls_ = 0;
  ProgressWatch watch_;
  std::set<pid_t> early_;  // ranks that exited 0 without reporting the end
};

}  // namespace

Result<GroupEnd> supervise(WorkerGroup& group, const SuperviseContext& context) {
  return Supervision(group, context).run();
}

int exit_code_for_worker(const WorkerExit& e) {
  if (e.signaled) return kExitRetryable;  // killed: the node or a peer failed
  if (e.code == kExitUsage || e.code == kExitRetryable) return e.code;
  return kExitFailure;  // a bug or a diverged run: requeueing would not help
}

Status status_for_exit_code(int code, std::string message) {
  if (code == kExitUsage) return Status::invalid(std::move(message));
  if (code == kExitRetryable) return Status::unavailable(std::move(message));
  return Status::internal(std::move(message));
}

}  // namespace partrain::agent
