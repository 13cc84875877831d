// Starts N copies of the comm_worker binary on localhost and collects their exit statuses,
// killing (by pid) any that outlive the deadline so a hung collective fails the test fast.
#pragma once

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace partrain::comm::testing {

struct WorkerExit {
  int pid = -1;
  int status = 0;          // raw waitpid status
  bool timed_out = false;  // killed by us at the deadline
  bool exited_ok() const { return !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0; }
  bool killed_by(int sig) const { return !timed_out && WIFSIGNALED(status) && WTERMSIG(status) == sig; }
};

// comm_worker is built next to the test binary; found through /proc/self/exe so the build
// folder may be moved (or copied to another machine).
inline std::string worker_path() {
  char self[4096] = {0};
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string dir = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string();
  dir = dir.substr(0, dir.find_last_of('/') + 1);
  std::string path = dir + "comm_worker";
  return ::access(path.c_str(), X_OK) == 0 ? path : std::string(COMM_WORKER_PATH);
}

// The secret travels in the environment, as it does for real workers.
inline std::vector<WorkerExit> run_workers(const std::string& mode, int world, int port, const std::string& secret,
                                           std::chrono::milliseconds timeout) {
  ::setenv("PARTRAIN_JOB_SECRET", secret.c_str(), 1);
  std::vector<WorkerExit> workers(static_cast<size_t>(world));
  const std::string path = worker_path();
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> args = {path, mode, std::to_string(r), std::to_string(world),
                                     std::to_string(port)};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    if (::posix_spawn(&pid, path.c_str(), nullptr, nullptr, argv.data(), environ) != 0) pid = -1;
    workers[static_cast<size_t>(r)].pid = pid;
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t left = 0;
  for (auto& w : workers) left += w.pid > 0 ? 1 : 0;
  while (left > 0) {
    for (auto& w : workers) {
      if (w.pid <= 0) continue;
      int status = 0;
      if (::waitpid(w.pid, &status, WNOHANG) == w.pid) {
        w.status = status;
        w.pid = -w.pid;
        --left;
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (auto& w : workers) {
        if (w.pid <= 0) continue;
        ::kill(w.pid, SIGKILL);
        ::waitpid(w.pid, &w.status, 0);
        w.timed_out = true;
        w.pid = -w.pid;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return workers;
}

}  // namespace partrain::comm::testing
