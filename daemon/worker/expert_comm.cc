// See expert_comm.h.
#include "worker/expert_comm.h"

#include <chrono>

namespace partrain::worker {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

void ExpertGroupComm::all_to_allv(const float* in, const std::vector<size_t>& send_counts, float* out,
                                  const std::vector<size_t>& recv_counts) {
  if (!status_) return;
  const auto t0 = Clock::now();
  status_ = ep_->all_to_allv(in, send_counts, out, recv_counts)->wait();
  comm_ms_ += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  ++collectives_;
}

// A double through a float all-reduce: its float head and the float rest, summed apart.
double ExpertGroupComm::sum(double x) {
  if (!status_) return x;
  const float head = static_cast<float>(x);
  float parts[2] = {head, static_cast<float>(x - static_cast<double>(head))};
  const auto t0 = Clock::now();
  status_ = ep_->all_reduce(parts, 2, comm::ReduceOp::kSum)->wait();
  comm_ms_ += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  ++collectives_;
  return static_cast<double>(parts[0]) + static_cast<double>(parts[1]);
}

double ExpertGroupComm::take_comm_ms() {
  const double ms = comm_ms_;
  comm_ms_ = 0;
  return ms;
}

int ExpertGroupComm::take_collectives() {
  const int n = collectives_;
  collectives_ = 0;
  return n;
}

}  // namespace partrain::worker
