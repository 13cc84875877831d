// The pipeline executor's per-step numbers that need every rank: a double carried through
// float collectives, the measured bubble of the action timelines, and the MoE routing of
// the global batch when each stage sees only its own MoE blocks.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "common/status.h"
#include "engine/model/model.h"
#include "engine/train/trainer.h"

namespace partrain::worker {

// A double through float collectives: its float head and the float rest, summed apart.
struct Split2 {
  float head, rest;
};
inline Split2 split(double x) {
  const float h = static_cast<float>(x);
  return {h, static_cast<float>(x - static_cast<double>(h))};
}
inline double join(float head, float rest) { return static_cast<double>(head) + static_cast<double>(rest); }

// 1 - sum(busy) / (P x makespan) over the pp group's ranks (P of them), from each rank's
// first action start, last action end and busy time (wall-clock us: ranks on one machine
// share the time base), gathered over `pp`.
Status measure_bubble(comm::Communicator& pp, int P, int64_t begin_us, int64_t end_us, int64_t busy_us,
                      double* bubble);

// The step's routing over the global batch into m: `stats` are this rank's chunks' counts
// (each a stage's own MoE blocks, the others' zero, in global block order), `aux` the sum of
// its forwards' aux losses over `micro_batches` micro-batches. Counts and dropped choices
// are summed over pp, then over dp (whole numbers well inside float's exact range); the aux
// loss likewise, then averaged over the micro-batches and the dp_size ranks.
Status sum_moe_stats(const std::vector<const engine::model::MoeStats*>& stats, double aux, int micro_batches,
                     comm::Communicator& pp, comm::Communicator* dp, int dp_size, engine::train::StepMetrics* m);

}  // namespace partrain::worker
