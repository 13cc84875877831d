// See child_probe.h.
#include "plugin/child_probe.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

namespace partrain::plugin {
namespace {

using Clock = std::chrono::steady_clock;

// Writes all of `text` (the child's answer).
void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

Result<std::string> run_probe_in_child(const std::string& path, const std::function<std::string()>& probe,
                                       std::chrono::milliseconds timeout) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return Status::io_error(fmt::format("{}: cannot probe the plugin: pipe: {}", path, std::strerror(errno)));
  }
  std::fflush(nullptr);  // nothing buffered is written twice
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return Status::io_error(fmt::format("{}: cannot probe the plugin: fork: {}", path, std::strerror(errno)));
  }
  if (pid == 0) {
    ::close(fds[0]);
    // A leading byte says the probe ran to its end; a child that dies writes nothing.
    write_all(fds[1], "+" + probe());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string answer;
  bool timed_out = false;
  const Clock::time_point deadline = Clock::now() + timeout;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (answer.size() < (1u << 20)) answer.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return Status::invalid(fmt::format("{}: refused: loading it did not finish within {:.1f} s (its constructors "
                                       "hang); fix the plugin or remove it", path,
                                       static_cast<double>(timeout.count()) / 1000));
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    return Status::invalid(fmt::format("{}: refused: loading it killed the process with signal {} (SIG{}) "
                                       "before partrain could call it (its constructors fault); fix the plugin "
                                       "or remove it", path, sig, name != nullptr ? name : "?"));
  }
  if (answer.empty() || answer[0] != '+') {
    return Status::invalid(fmt::format("{}: refused: loading it ended the process (exit code {}) before "
                                       "partrain could call it (its constructors exit); fix the plugin or "
                                       "remove it", path, WIFEXITED(status) ? WEXITSTATUS(status) : -1));
  }
  return answer.substr(1);
}

}  // namespace partrain::plugin
