// A Slurm node's address from Slurm itself (see node_address.h).
#include "agent/node_address.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <sstream>
#include <vector>

#include <fmt/format.h>

namespace partrain::agent {
namespace {

using Clock = std::chrono::steady_clock;

// scontrol retries an unreachable slurmctld for MessageTimeout (default 10 s) per try.
constexpr std::chrono::seconds kScontrolLimit{30};

bool is_numeric_address(const std::string& host) {
  unsigned char buf[16];
  return ::inet_pton(AF_INET, host.c_str(), buf) == 1 || ::inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// Runs argv with stdin from /dev/null; stdout and stderr together into *out. The exit
// status, or -1 when it could not run or ran past kScontrolLimit (then it is killed).
int capture(const std::vector<std::string>& argv, std::string* out) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return -1;
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, 0);
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  const Clock::time_point deadline = Clock::now() + kScontrolLimit;
  bool timed_out = false;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    struct pollfd p {fds[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out->append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

std::string first_line(const std::string& text) {
  const std::string line = text.substr(0, text.find('\n'));
  return line.empty() ? "no output" : line;
}

}  // namespace

std::optional<std::string> parse_node_addr(const std::string& scontrol_output,
                                           const std::string& node) {
  std::istringstream lines(scontrol_output);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string word, name, addr;
    while (words >> word) {
      if (word.rfind("NodeName=", 0) == 0) name = word.substr(9);
      if (word.rfind("NodeAddr=", 0) == 0) addr = word.substr(9);
    }
    if (name == node && !addr.empty()) return addr;
  }
  return std::nullopt;
}

std::string slurm_node_address(const std::string& name, const std::string& scontrol,
                               std::string* why) {
  if (name == "localhost" || is_numeric_address(name)) return name;
  std::string out;
  const int rc = capture({scontrol, "-o", "show", "node", name}, &out);
  if (rc == 0) {
    if (std::optional<std::string> addr = parse_node_addr(out, name)) return *addr;
    if (why != nullptr) *why = fmt::format("'{} -o show node {}' shows no NodeAddr", scontrol, name);
  } else if (why != nullptr) {
    if (rc < 0) {
      *why = fmt::format("'{} -o show node {}' did not run or timed out", scontrol, name);
    } else if (rc == 127 && out.empty()) {
      *why = fmt::format("'{}' is not on PATH", scontrol);
    } else {
      *why = fmt::format("'{} -o show node {}' exited {}: {}", scontrol, name, rc, first_line(out));
    }
  }
  return name;
}

}  // namespace partrain::agent
