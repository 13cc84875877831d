// See supervisor.h.
#include "agent/supervisor.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include <fmt/format.h>

#include "agent/cpu_binding.h"
#include "common/progress.h"
#include "common/log.h"

extern char** environ;

namespace partrain::agent {

std::string WorkerExit::describe() const {
  if (!signaled) return fmt::format("exited with code {}", code);
  const char* name = sigabbrev_np(code);
  return fmt::format("killed by signal {} (SIG{})", code, name != nullptr ? name : "?");
}

Status WorkerGroup::spawn(const std::string& binary, const std::vector<std::string>& args,
                          const std::vector<WorkerSpec>& specs) {
  // Each local rank's block of whole cores (cpu_binding.h); unbound when hwloc fails.
  std::vector<std::vector<int>> rank_cpus;
  if (Result<CoreList> cores = allowed_cores(); cores) {
    rank_cpus = cpus_per_rank(*cores, static_cast<int>(specs.size()));
  } else {
    log::warn("agent", "{}", cores.status().message());
  }
  const pid_t agent = ::getpid();
  for (const WorkerSpec& w : specs) {
    // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
    std::map<std::string, std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const char* eq = std::strchr(*e, '=');
      if (eq != nullptr) env[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
    }
    for (const auto& [k, v] : w.env) env[k] = v;
    // The progress pipe: both ends close on exec, the child clears that flag on its write end.
    int progress[2] = {-1, -1};
    if (::pipe2(progress, O_CLOEXEC) == 0) {
      env[progress::kFdVariable] = std::to_string(progress[1]);
    } else {
      log::warn("agent", "rank {}: no progress pipe ({}); the watchdog cannot see it", w.rank, std::strerror(errno));
    }
    std::vector<std::string> env_strings;
    for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
    std::vector<char*> envp, argv;
    for (std::string& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> all_args{binary};
    all_args.insert(all_args.end(), args.begin(), args.end());
    for (std::string& s : all_args) argv.push_back(s.data());
    argv.push_back(nullptr);
    cpu_set_t mine;
    CPU_ZERO(&mine);
    const bool bind = static_cast<size_t>(w.local_rank) < rank_cpus.size();
    if (bind) {
      for (int c : rank_cpus[static_cast<size_t>(w.local_rank)]) CPU_SET(c, &mine);
    }
    const pid_t pgid = pgid_;
    const pid_t pid = ::fork();
    if (pid < 0) {
      for (int fd : progress) {
        if (fd >= 0) ::close(fd);
      }
      return Status::unavailable(fmt::format("cannot start the worker of rank {}: fork: {}", w.rank,
                                             std::strerror(errno)));
    }
    if (pid == 0) {
      ::setpgid(0, pgid);  // the first worker leads the group (pgid 0 = itself)
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != agent) ::_exit(75);  // the agent died before prctl
      if (bind) ::sched_setaffinity(0, sizeof mine, &mine);
      if (progress[1] >= 0) ::fcntl(progress[1], F_SETFD, 0);
      ::execve(binary.c_str(), argv.data(), envp.data());
      ::_exit(127);
    }
    ::setpgid(pid, pgid == 0 ? pid : pgid);  // also here: no race with the first kill
    if (pgid_ == 0) pgid_ = pid;
    pids_.emplace_back(w.rank, pid);
    alive_.push_back(true);
    if (progress[1] >= 0) ::close(progress[1]);
    if (progress[0] >= 0) ::fcntl(progress[0], F_SETFL, O_NONBLOCK);
    progress_fds_.push_back(progress[0]);
  }
  return Status::ok();
}

std::vector<WorkerExit> WorkerGroup::poll() {
  std::vector<WorkerExit> out;
  for (size_t i = 0; i < pids_.size(); ++i) {
    if (!alive_[i]) continue;
    int status = 0;
    const pid_t r = ::waitpid(pids_[i].second, &status, WNOHANG);
    if (r != pids_[i].second) continue;
    alive_[i] = false;
    WorkerExit e;
    e.rank = pids_[i].first;
    e.pid = r;
    e.signaled = WIFSIGNALED(status);
    e.code = e.signaled ? WTERMSIG(status) : WEXITSTATUS(status);
    out.push_back(e);
  }
  return out;
}

// Only while a worker is unreaped: then the group id cannot have been reused.
void WorkerGroup::signal_all(int sig) {
  if (pgid_ != 0 && running() > 0) ::kill(-pgid_, sig);
}

void WorkerGroup::kill_all() {
  signal_all(SIGKILL);
  for (size_t i = 0; i < pids_.size(); ++i) {
    if (!alive_[i]) continue;
    int status = 0;
    while (::waitpid(pids_[i].second, &status, 0) < 0 && errno == EINTR) {
    }
    alive_[i] = false;
  }
}

WorkerGroup::~WorkerGroup() {
  kill_all();
  for (int fd : progress_fds_) {
    if (fd >= 0) ::close(fd);
  }
}

int WorkerGroup::running() const {
  int n = 0;
  for (bool a : alive_) n += a ? 1 : 0;
  return n;
}

}  // namespace partrain::agent
