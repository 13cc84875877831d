// What tests in every folder need, written once: read a file, a scratch folder, an
// environment variable for one scope, a shell command with its output read back (the CLI
// tests), and a process started with its output in files (the multi-process tests), plus a
// free loopback port. Header-only; tests/ is on every test's include path
// (tests/CMakeLists.txt), so `#include "test_util.h"`.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace partrain::testing {

namespace fs = std::filesystem;

// The whole file as text; empty when it cannot be read.
inline std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A fresh folder under the system temp dir (/tmp/PREFIX-XXXXXX), removed with everything
// in it when the object goes.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix = "partrain-test") {
    std::string tmpl = (fs::temp_directory_path() / (prefix + "-XXXXXX")).string();
    const char* made = ::mkdtemp(tmpl.data());
    EXPECT_NE(made, nullptr) << tmpl;
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const fs::path& path() const { return path_; }
  // Writes `text` to path()/relative (making folders) and returns the full path.
  std::string write(const std::string& relative, const std::string& text) const {
    const fs::path p = path_ / relative;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }

 private:
  fs::path path_;
};

// Sets (or, with nullopt, unsets) an environment variable for the life of the object.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, std::optional<std::string> value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    if (value) {
      ::setenv(name_.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// Runs `cmd` through /bin/sh with stdout into `out` and stderr into `err` (into `out` too
// when `err` is empty); returns the exit code, -1 when it did not exit.
inline int sh(const std::string& cmd, const fs::path& out, const fs::path& err = {}) {
  const std::string full = cmd + " >'" + out.string() + "' " +
                           (err.empty() ? std::string("2>&1") : "2>'" + err.string() + "'");
  const int status = std::system(full.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// What a command did: its exit code (-1 when it did not exit), stdout and stderr.
struct Outcome {
  int rc = -1;
  std::string out;
  std::string err;
};

// Runs `cmd` through /bin/sh and reads back what it printed (a CLI test's runner), e.g.
// run_shell("'" PARTRAIN_CLI "' layout --help").
inline Outcome run_shell(const std::string& cmd) {
  const ScratchDir dir("partrain-sh");
  Outcome r;
  r.rc = sh(cmd, dir.path() / "out", dir.path() / "err");
  r.out = slurp(dir.path() / "out");
  r.err = slurp(dir.path() / "err");
  return r;
}

// A process started by start(): its pid and the files its stdout and stderr go to.
struct Proc {
  pid_t pid = -1;
  std::string out, err;
};

// Starts argv (argv[0] a path) with `env` added, stdout/stderr into DIR/TAG.out and
// DIR/TAG.err; does not wait.
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
// (SIGKILL) and -1 is returned: a hang.
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
