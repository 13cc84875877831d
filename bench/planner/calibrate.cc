// Fitting sustained_clock on the calibration half (see calibrate.h).
#include "bench/planner/calibrate.h"

#include <algorithm>
#include <cmath>

namespace partrain::bench {

Result<std::vector<PlannedRun>> plan_published(const std::string& hardware_dir) {
  std::vector<PlannedRun> rows;
  for (const PublishedRun& run : published_runs()) {
    if (!run.excluded.empty()) continue;
    Result<planner::HardwareProfile> hw = profile_of(run, hardware_dir);
    if (!hw) return hw.status();
    Result<Prediction> p = predict(run, *hw);
    if (!p) return Status::invalid(run.name + ": " + p.status().message());
    rows.push_back({&run, *hw, std::move(p).value()});
  }
  return rows;
}

std::string device_family(const std::string& profile) {
  return profile.rfind("A100", 0) == 0 ? "A100" : "H100";
}

Prediction with_clock(const PlannedRun& row, double clock) {
  planner::HardwareProfile hw = row.hw;
  hw.sustained_clock = clock;
  return retime(*row.run, row.first, hw);
}

std::map<std::string, double> fit_sustained_clock(const std::vector<PlannedRun>& rows, Half half) {
  std::map<std::string, std::vector<const PlannedRun*>> by_family;
  for (const PlannedRun& r : rows) {
    if (r.run->half == half) by_family[device_family(r.run->profile)].push_back(&r);
  }
  std::map<std::string, double> out;
  for (const auto& [family, group] : by_family) {
    // A lambda may not capture a structured binding before C++20's P1091 (clang 16): a plain
    // reference for the sanitizer tree's clang 14.
    const std::vector<const PlannedRun*>& members = group;
    auto loss = [&](double clock) {
      double worst = 0, sum = 0;
      for (const PlannedRun* r : members) {
        const double e = std::log(1 + with_clock(*r, clock).error);
        worst = std::max(worst, std::fabs(e));
        sum += e * e;
      }
      return worst + 0.01 * sum / static_cast<double>(members.size());
    };
    // Golden-section search: the loss is unimodal in the clock (every row's time falls as
    // the clock rises, so each |log error| is V-shaped).
    const double g = (std::sqrt(5.0) - 1) / 2;
    double a = 0.5, b = 1.0, c = b - g * (b - a), d = a + g * (b - a);
    double fc = loss(c), fd = loss(d);
    while (b - a > 1e-4) {
      if (fc < fd) {
        b = d, d = c, fd = fc, c = b - g * (b - a), fc = loss(c);
      } else {
        a = c, c = d, fc = fd, d = a + g * (b - a), fd = loss(d);
      }
    }
    out[family] = (a + b) / 2;
  }
  return out;
}

}  // namespace partrain::bench
