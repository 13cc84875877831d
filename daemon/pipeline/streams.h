// Which send each receive matches: per ordered pair of ranks there is one stream of
// activations and one of gradients, each first-in first-out (include/partrain/schedule.h).
// Shared by the checker and the simulator.
#pragma once

#include <cstddef>
#include <vector>

#include "common/status.h"
#include "pipeline/schedule.h"

namespace partrain::pipeline {

struct Ref {
  int rank = -1;
  size_t pos = 0;
};

struct Matching {
  // send_of[r][i]: for a receive at rank r action i, its send; unset (rank -1) otherwise.
  std::vector<std::vector<Ref>> send_of;
};

// Pairs the k-th send of each stream with its k-th receive. Refuses, naming both actions,
// a pair that disagrees on micro-batch or stage (the ranks list the stream in different
// orders), a receive without a send and a send never received.
Result<Matching> match_streams(const Schedule& s);

}  // namespace partrain::pipeline
