// See progress.h.
#include "common/progress.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace partrain::progress {
namespace {

using Clock = std::chrono::steady_clock;

struct Reporter {
  int fd = -1;
  std::mutex mu;  // phases are entered from the training thread and the async saver
  int64_t step = 0;
  char phase[64] = "start";
  int waiting = 0;  // Waiting objects alive
  int64_t sent_step = -1;
  char sent_phase[64] = "";
  bool sent_waiting = false;
  Clock::time_point sent_at{};

  Reporter() {
    const char* v = std::getenv(kFdVariable);
    if (v == nullptr || *v == '\0') return;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end == v || *end != '\0' || n < 0 || ::fcntl(static_cast<int>(n), F_GETFD) < 0) return;
    fd = static_cast<int>(n);
    (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    (void)::fcntl(fd, F_SETFD, FD_CLOEXEC);  // never handed on to a plugin probe's exec
  }

  // Writes "STEP PHASE\n" when it changed or a second passed (called with mu held).
  void send() {
    const Clock::time_point now = Clock::now();
    const bool w = waiting > 0;
    if (step == sent_step && std::strcmp(phase, sent_phase) == 0 && w == sent_waiting &&
        now - sent_at < std::chrono::seconds(1)) {
      return;
    }
    char line[112];
    const int n = std::snprintf(line, sizeof line, "%lld %s%s\n", static_cast<long long>(step), phase,
                                w ? "\twaiting" : "");
    if (n <= 0 || static_cast<size_t>(n) >= sizeof line) return;
    if (::write(fd, line, static_cast<size_t>(n)) == n) {
      sent_step = step;
      std::memcpy(sent_phase, phase, sizeof phase);
      sent_waiting = w;
      sent_at = now;
    }
  }
};

Reporter& reporter() {
  static Reporter r;
  return r;
}

}  // namespace

void enter(std::string_view phase) {
  Reporter& r = reporter();
  if (r.fd < 0) return;
  std::lock_guard<std::mutex> lock(r.mu);
  const size_t n = std::min(phase.size(), sizeof r.phase - 1);
  std::memcpy(r.phase, phase.data(), n);
  r.phase[n] = '\0';
  r.send();
}

Waiting::Waiting() {
  Reporter& r = reporter();
  if (r.fd < 0) return;
  on_ = true;
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.waiting++ == 0) r.send();
}

Waiting::~Waiting() {
  if (!on_) return;
  Reporter& r = reporter();
  std::lock_guard<std::mutex> lock(r.mu);
  if (--r.waiting == 0) r.send();
}

void begin_step(int64_t step) {
  Reporter& r = reporter();
  if (r.fd < 0) return;
  std::lock_guard<std::mutex> lock(r.mu);
  r.step = step;
  std::strcpy(r.phase, "step start");
  r.send();
}

}  // namespace partrain::progress
