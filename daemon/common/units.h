// Numbers as people read them in the CLI's output: 10.8M tokens/s, 24.3 ms, 437.8K
// parameters, 1 rank, 12.5 MB.
//
//   human_count(10'812'345) == "10.8M"   (K, M, B, T: powers of 1000; below 1000 as is)
//   human_count(437'812)    == "437.8K"
//   human_bytes(13'107'200) == "12.5 MiB" (powers of 1024)
//   human_ms(24.31)         == "24.3 ms"  (>= 10 s: "12.3 s"; >= 10 min: "12.5 min")
//   plural(1, "rank")       == "1 rank",  plural(8, "rank") == "8 ranks"
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include <fmt/format.h>

namespace partrain {

inline std::string human_count(double n) {
  static constexpr const char* kSuffix[] = {"", "K", "M", "B", "T"};
  int k = 0;
  double v = n;
  while (std::fabs(v) >= 999.95 && k < 4) v /= 1000.0, ++k;
  if (k == 0) return std::fabs(v - std::round(v)) < 1e-9 ? fmt::format("{:.0f}", v) : fmt::format("{:.1f}", v);
  return fmt::format("{:.1f}{}", v, kSuffix[k]);
}

inline std::string human_bytes(double b) {
  static constexpr const char* kSuffix[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int k = 0;
  while (std::fabs(b) >= 1023.95 && k < 5) b /= 1024.0, ++k;
  return k == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.1f} {}", b, kSuffix[k]);
}

inline std::string human_ms(double ms) {
  if (ms >= 600'000.0) return fmt::format("{:.1f} min", ms / 60'000.0);
  if (ms >= 10'000.0) return fmt::format("{:.1f} s", ms / 1000.0);
  if (ms >= 100.0) return fmt::format("{:.0f} ms", ms);
  return fmt::format("{:.1f} ms", ms);
}

inline std::string plural(int64_t n, const std::string& noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

}  // namespace partrain
