// Processes for the multi-process tests (tests/runtime, tests/store): start a command with
// extra environment and its output in files, wait for it, read files, pick a free port.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace partrain::testing {

struct Proc {
  pid_t pid = -1;
  std::string out, err;  // files
};

// Starts argv with `env` added, stdout/stderr into DIR/TAG.out and DIR/TAG.err.
inline Proc start(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                  const std::string& dir, const std::string& tag) {
  Proc p;
  p.out = dir + "/" + tag + ".out";
  p.err = dir + "/" + tag + ".err";
  std::fflush(nullptr);  // or the child's freopen writes our buffered output a second time
  p.pid = ::fork();
  if (p.pid == 0) {
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    if (!std::freopen(p.out.c_str(), "w", stdout) || !std::freopen(p.err.c_str(), "w", stderr)) ::_exit(126);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return p;
}

// The exit code, or 128 + the signal that killed it.
inline int wait_exit(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The exit code (as wait_exit) if the process ends within `seconds`; else it is killed
// (SIGKILL, with its process group when it leads one) and -1 is returned: a hang.
inline int wait_exit_within(pid_t pid, double seconds) {
  for (int waited_ms = 0; waited_ms < seconds * 1000; waited_ms += 10) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    ::usleep(10000);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return -1;
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A port nobody listens on right now (the kernel's pick, released at once).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace partrain::testing
