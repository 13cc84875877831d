// Refusal lines at a bounded rate: a flood of bad connections must not become a flood of
// log lines (66k WARN lines in 90 s once). At most `burst` lines per `window`; those beyond
// are counted by kind and said in one summary line once the window is over.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace partrain::comm {

class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  LogLimiter(int burst, std::chrono::milliseconds window) : burst_(burst), window_(window) {}

  // True when the caller may log this event now; false when it is counted under `kind`.
  bool allow(std::string_view kind, Clock::time_point now);
  // Once the window is over: "1234 more refused connections in the last 10 s (1200 no
  // handshake, 34 wrong job secret)" and a new window; "" when nothing was counted or the
  // window still runs.
  std::string take_summary(Clock::time_point now);
  uint64_t suppressed_total() const { return suppressed_total_; }

 private:
  void roll(Clock::time_point now);
  int burst_;
  std::chrono::milliseconds window_;
  Clock::time_point start_{};
  int logged_ = 0;
  std::map<std::string, uint64_t, std::less<>> counted_;
  uint64_t suppressed_total_ = 0;
};

}  // namespace partrain::comm
