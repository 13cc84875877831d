// The supervise loop: one worker group's run on this node, from its start to its end.
//
// Every 50 ms it reaps the workers that ended (waitpid) and looks at what else may end the
// group, in this order:
//   1. a worker that died: the first bad exit is the cause. A worker's success is a fact it
//      reports, never its exit status alone: it sets <finished_prefix>finished/<rank> in the
//      store once its run reached the last step, and an exit 0 without that key (every rank
//      of a plugin that called exit(0) at step 5 of 30) is a failure of that rank, retryable
//      (the job resumes from its newest checkpoint), taken as the cause before any other
//      exit code, since its peers' errors are only echoes of it. A rank that fails without
//      SIGKILL often only lost a peer, so the loop waits 200 ms for the peer's own death to
//      be reaped too, and takes SIGKILL first, then other signals, then exit codes: the log
//      names the cause, not the echo. A retryable cause (killed, or exit 75) with in-job
//      restarts left asks every node for a restart (restart/N); any other ends the job;
//   2. a restart another node asked for (checked every 10th poll, on several nodes only);
//   3. SIGTERM/SIGINT/SIGHUP/SIGUSR1 to the agent: forwarded once to every worker (as
//      SIGTERM), which stop at the next step boundary and exit 75. `stop_grace` after the
//      first SIGTERM/SIGINT/SIGHUP (SIGUSR1, the time limit's early warning, starts no
//      deadline: the time limit's own SIGTERM does) the ranks still running are killed with
//      SIGKILL, in one line naming them: a rank hung in a collective or in a plugin never
//      reaches the boundary, and SIGTERM only asks it to;
//   4. the heartbeat's failure (heartbeat.h): a lost peer, a silent store, another node's
//      abort;
//   5. the watchdog (progress_watch.h): a local rank that reported no progress for
//      `progress_timeout` (SIGSTOP, a stuck collective) ends the job with exit 75, naming
//      the rank, its step and its phase.
// Whatever ends the group badly kills every worker of this node first (one SIGKILL to the
// process group, no SIGTERM first: a rank that lost a peer cannot save, its collectives need
// the peer, so a grace would only delay the requeue) and, unless the store is what failed,
// sets job/abort for the other nodes.
//
// Exit codes (partraind(8)): a worker's exit maps by exit_code_for_worker; the Status the
// loop returns carries the code that exit_code_for (common/exit_codes.h) maps back to it.
// Example: rank 1 killed by SIGKILL, no restarts left -> unavailable("rank 1 (pid 4242)
// died: killed by signal 9 (SIGKILL); stopping every worker of this node") -> exit 75.
#pragma once

#include <chrono>
#include <string>

#include "agent/heartbeat.h"
#include "agent/supervisor.h"
#include "comm/rendezvous/client.h"
#include "common/status.h"

namespace partrain::agent {

// How long the workers have, after a stop's SIGTERM, to save at the next step boundary and
// exit before the agent kills them with SIGKILL: 20 s. Slurm's SIGKILL follows its SIGTERM
// (scancel, the time limit, scontrol requeue) by KillWait, default 30 s, on every node at
// once: the agent must have killed, reaped and exited 75 before that, or the job ends by a
// signal and RequeueExit=75 never sees it. The 10 s left covers the store's abort to the other
// nodes and their reaping. 20 s holds one step and a final save of a small or mid-sized model
// (the save writes 16 bytes per parameter, spread over the ranks); at scale a step and a save
// take longer than any grace that fits KillWait, so large jobs ask for the early warning
// (sbatch --signal=USR1@SECONDS), whose stop has no deadline before the time limit's SIGTERM.
inline constexpr std::chrono::milliseconds kStopGrace{20000};

// How a worker group's run ended, when it did not fail.
enum class GroupEnd {
  kFinished,  // every rank exited 0 after reporting that it reached the run's end
  kStopped,   // SIGTERM/SIGINT: the ranks stopped at a step boundary (the job exits 75)
  kRestart,   // in-job restart: this node's group is down, every node's goes down too
};

// What the loop watches besides the group.
struct SuperviseContext {
  comm::RendezvousClient* store = nullptr;  // the agent's connection: job/abort, restart/N
  const Heartbeat* heartbeat = nullptr;
  // The key prefix of this attempt's finish reports ("a0.0/"): a rank that exits 0 must
  // have set <finished_prefix>finished/<rank>. Default: "".
  std::string finished_prefix;
  int node = 0;        // this node's index
  int num_nodes = 1;
  int restarts = 0;      // in-job restarts so far; the next one is restart/<restarts + 1>
  int max_restarts = 0;  // [checkpoint] max_restarts
  // After a SIGTERM/SIGINT/SIGHUP, how long the workers have before they are killed.
  // Default: kStopGrace (20 s).
  std::chrono::milliseconds stop_grace{kStopGrace};
  // How long a rank may report no progress before the job is ended (0: never). Default:
  // 600 s, the site config's [agent] progress_timeout.
  std::chrono::milliseconds progress_timeout{600000};
};

// Supervises `group` until every worker ended. A Status when the group failed (the
// message is the one line the agent logs), else how it ended.
Result<GroupEnd> supervise(WorkerGroup& group, const SuperviseContext& context);

// The agent's exit code for a worker that ended badly: 75 when killed by a signal (the
// node or a peer failed) or when it exited 75, 2 when it exited 2 (a configuration error),
// else 1 (a bug or a diverged run: requeueing would not help).
int exit_code_for_worker(const WorkerExit& e);

// A Status that exit_code_for maps to `code` (2 invalid, 75 unavailable, else internal),
// saying `message`.
Status status_for_exit_code(int code, std::string message);

}  // namespace partrain::agent
