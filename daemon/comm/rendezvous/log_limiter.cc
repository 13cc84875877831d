// See log_limiter.h.
#include "comm/rendezvous/log_limiter.h"

#include <fmt/format.h>

namespace partrain::comm {

void LogLimiter::roll(Clock::time_point now) {
  start_ = now;
  logged_ = 0;
  counted_.clear();
}

bool LogLimiter::allow(std::string_view kind, Clock::time_point now) {
  if (start_ == Clock::time_point{} || (counted_.empty() && now - start_ >= window_)) roll(now);
  if (logged_ < burst_ && counted_.empty()) {
    ++logged_;
    return true;
  }
  auto it = counted_.find(kind);
  if (it == counted_.end()) it = counted_.emplace(std::string(kind), 0).first;
  ++it->second;
  ++suppressed_total_;
  return false;
}

std::string LogLimiter::take_summary(Clock::time_point now) {
  if (counted_.empty() || now - start_ < window_) return "";
  uint64_t total = 0;
  std::string kinds;
  for (const auto& [kind, n] : counted_) {
    total += n;
    kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", n, kind);
  }
  const double secs = std::chrono::duration<double>(now - start_).count();
  roll(now);
  return fmt::format("{} more refused connections in the last {:.0f} s ({})", total, secs, kinds);
}

}  // namespace partrain::comm
