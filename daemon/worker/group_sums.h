// Numbers the worker sums over a group through float collectives (every plugin ABI and
// transport reduces float32): a double carried as its float head and the float rest, and
// the measured pipeline bubble, whose wall-clock times are carried as exact float pieces.
#pragma once

#include <cstdint>

#include "comm/communicator.h"
#include "common/status.h"

namespace partrain::worker {

// A double as two floats that sum back to it within float's precision of the rest: the
// head and the remainder, each reduced apart (a loss or a sum of squares keeps ~48 bits
// over a float all-reduce). Every double the worker sums over a group goes through these.
struct Split2 {
  float head, rest;
};
inline Split2 split(double x) {
  const float h = static_cast<float>(x);
  return {h, static_cast<float>(x - static_cast<double>(h))};
}
inline double join(float head, float rest) { return static_cast<double>(head) + static_cast<double>(rest); }

// x summed over `group` (the double through a 2-float all-reduce).
Result<double> sum_over(comm::Communicator& group, double x);

// 1 - sum(busy) / (P x makespan) over the pp group's ranks (P of them), from each rank's
// first action start, last action end and busy time (wall-clock us: ranks on one machine
// share the time base), gathered over `pp`.
Status measure_bubble(comm::Communicator& pp, int P, int64_t begin_us, int64_t end_us, int64_t busy_us,
                      double* bubble);

}  // namespace partrain::worker
