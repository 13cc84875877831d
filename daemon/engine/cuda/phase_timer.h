// Device time per named phase, measured with CUDA events: mark(name) records an event on the
// stream and the time until the next mark (or finish()) is added to `name`. A step marked
// this way gives a table of where its time went (bench/gpu --phases, PARTRAIN_CUDA_PROFILE).
// Disabled, mark() costs nothing; enabled, one event record per mark (about a microsecond of
// host time, no device synchronisation until finish()).
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace partrain::engine::cuda {

class PhaseTimer {
 public:
  PhaseTimer() = default;
  ~PhaseTimer();
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

  void set_stream(cudaStream_t s) { stream_ = s; }
  void set_enabled(bool on) { enabled_ = on; }
  bool enabled() const { return enabled_; }
  // `name` must outlive the timer (a string literal).
  void mark(const char* name);
  // Closes the last interval, waits for the device and adds every interval to its phase.
  Status finish();
  // Milliseconds per phase, in the order the phases first appeared; and their sum.
  const std::vector<std::pair<std::string, double>>& totals() const { return totals_; }
  double total_ms() const;
  void clear() { totals_.clear(); }

 private:
  cudaStream_t stream_ = nullptr;
  bool enabled_ = false;
  std::vector<cudaEvent_t> events_;    // pool, grown on demand
  std::vector<const char*> pending_;   // phase of the interval starting at events_[i]
  std::vector<std::pair<std::string, double>> totals_;
};

}  // namespace partrain::engine::cuda
