// The agent's worker group: one process per local rank, fork+exec'd into one process group
// so a single kill(-pgid) reaches every worker (and anything they started), each bound to
// its share of the CPUs and, on GPU nodes, to one device.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace partrain::agent {

struct WorkerSpec {
  int rank = 0;         // global rank
  int local_rank = 0;   // index on this node
  std::vector<std::pair<std::string, std::string>> env;  // set on top of the agent's
};

// How a worker ended.
struct WorkerExit {
  int rank = 0;
  pid_t pid = 0;
  bool signaled = false;
  int code = 0;  // exit status, or the signal number when signaled
  std::string describe() const;  // "exited with code 2", "killed by signal 9 (SIGKILL)"
};

class WorkerGroup {
 public:
  WorkerGroup() = default;
  ~WorkerGroup();  // kill_all() + reap
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Starts `binary args...` for each spec, each bound to its local rank's block of whole
  // cores (cpu_binding.h), with a pipe to report its progress on (PARTRAIN_PROGRESS_FD,
  // common/progress.h). Workers die with the agent (PR_SET_PDEATHSIG).
  Status spawn(const std::string& binary, const std::vector<std::string>& args,
               const std::vector<WorkerSpec>& specs);

  // Reaps workers that ended since the last call (never blocks).
  std::vector<WorkerExit> poll();
  // Sends `sig` to the whole group.
  void signal_all(int sig);
  // SIGKILL to the group, then waits for every worker.
  void kill_all();
  int running() const;
  const std::vector<std::pair<int, pid_t>>& pids() const { return pids_; }  // (rank, pid)
  // The read end of each worker's progress pipe (non-blocking), in pids() order; -1 when
  // it could not be made. Closed with the group.
  const std::vector<int>& progress_fds() const { return progress_fds_; }
  bool alive(size_t i) const { return alive_[i]; }

 private:
  pid_t pgid_ = 0;
  std::vector<std::pair<int, pid_t>> pids_;
  std::vector<bool> alive_;
  std::vector<int> progress_fds_;
};

}  // namespace partrain::agent
