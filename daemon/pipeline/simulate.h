// The timeline of a schedule under a cost model, by simulating every rank's action list
// with the transfer semantics of include/partrain/schedule.h: a send is posted at once and
// never blocks; a receive waits until its matching send is posted (plus `transfer` time).
// A rank that waits on a receive whose send never comes is a deadlock, reported with the
// ranks that wait on each other.
//
// Cost model: `forward`, `backward` and `weight` are the time of one micro-batch through
// one rank's share of the model when each rank holds one chunk (v = 1). With v chunks per
// rank a chunk holds 1/v of that share, so each action costs 1/v as much. A whole backward
// costs `backward`; split, the input gradient costs backward - weight and the weight
// gradient `weight`. The bubble fraction is the idle share of all ranks' time from 0 to
// the end of the last action: 1 - sum(busy) / (pp * makespan). For GPipe and 1F1B with
// these uniform stages it is (p-1)/(m+p-1), for interleaved 1F1B (p-1)/(v*m+p-1).
#pragma once

#include <cstddef>
#include <vector>

#include "common/status.h"
#include "pipeline/schedule.h"

namespace partrain::pipeline {

struct Costs {
  double forward = 1.0;   // F of one micro-batch through one rank's share. Default: 1
  double backward = 2.0;  // whole backward (B). Default: 2
  double weight = 1.0;    // the weight-gradient part of it (W), when split. Default: 1
  double transfer = 0.0;  // from a send being posted to its receive completing. Default: 0
};

// Refuses costs that are not positive, or a weight share not strictly inside backward.
Status validate_costs(const Costs& c);

// The duration of a compute action for a schedule with v chunks per rank; 0 for transfers.
double cost_of(const Action& a, const Costs& c, int v);

struct Span {
  double start = 0;  // transfers: start == end, the moment the send was posted or the
  double end = 0;    // receive completed
};

struct Timeline {
  std::vector<std::vector<Span>> ranks;  // ranks[r][i]: rank r's action i
  std::vector<double> busy;              // compute time per rank
  double makespan = 0;                   // end of the last action on any rank
  double bubble = 0;                     // 1 - sum(busy) / (pp * makespan)
  // Idle share of one rank: 1 - busy[r] / makespan.
  double rank_bubble(int r) const { return makespan > 0 ? 1.0 - busy[r] / makespan : 0.0; }
};

// Simulates `s`; invalid when a receive has no matching send or the ranks deadlock. Expects
// the per-rank rules of check.h to hold (check() calls this last).
Result<Timeline> simulate(const Schedule& s, const Costs& c = {});

// Peak micro-batches in flight per rank, from the order alone (one per chunk and
// micro-batch): `activations` counts those forwarded whose backward (B or backward-input)
// has not run; `held` those forwarded whose weight gradient (B or W) has not run.
struct InFlight {
  int activations = 0;
  int held = 0;
};
std::vector<InFlight> peak_in_flight(const Schedule& s);

}  // namespace partrain::pipeline
