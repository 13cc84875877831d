// PhaseTimer: see phase_timer.h.
#include "engine/cuda/phase_timer.h"

#include "engine/cuda/cuda_status.h"

namespace partrain::engine::cuda {

PhaseTimer::~PhaseTimer() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

void PhaseTimer::mark(const char* name) {
  if (!enabled_) return;
  const size_t i = pending_.size();
  if (i == events_.size()) {
    cudaEvent_t e = nullptr;
    if (cudaEventCreate(&e) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    events_.push_back(e);
  }
  if (cudaEventRecord(events_[i], stream_) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  pending_.push_back(name);
}

Status PhaseTimer::finish() {
  if (pending_.empty()) return Status::ok();
  const char* end = "";
  mark(end);
  const size_t n = pending_.size();
  PARTRAIN_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(events_[n - 1]));
  for (size_t i = 0; i + 1 < n; ++i) {
    float ms = 0.0f;
    PARTRAIN_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
    bool found = false;
    for (auto& [name, total] : totals_) {
      if (name == pending_[i]) {
        total += ms;
        found = true;
        break;
      }
    }
    if (!found) totals_.emplace_back(pending_[i], ms);
  }
  pending_.clear();
  return Status::ok();
}

double PhaseTimer::total_ms() const {
  double t = 0.0;
  for (const auto& [name, ms] : totals_) t += ms;
  return t;
}

}  // namespace partrain::engine::cuda
