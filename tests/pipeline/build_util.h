// Terse hand-written schedules for the pipeline tests: F(0), SA(0, 1) ("send the
// activations of micro-batch 0 to rank 1"), RG(0, 1), ... with an optional chunk.
#pragma once

#include <string>
#include <vector>

#include "pipeline/schedule.h"

namespace partrain::pipeline::testing {

inline Action F(int mb, int chunk = 0) { return {Kind::kForward, mb, chunk, -1}; }
inline Action B(int mb, int chunk = 0) { return {Kind::kBackward, mb, chunk, -1}; }
inline Action Bi(int mb, int chunk = 0) { return {Kind::kBackwardInput, mb, chunk, -1}; }
inline Action W(int mb, int chunk = 0) { return {Kind::kBackwardWeight, mb, chunk, -1}; }
inline Action SA(int mb, int peer, int chunk = 0) { return {Kind::kSendActivation, mb, chunk, peer}; }
inline Action RA(int mb, int peer, int chunk = 0) { return {Kind::kRecvActivation, mb, chunk, peer}; }
inline Action SG(int mb, int peer, int chunk = 0) { return {Kind::kSendGrad, mb, chunk, peer}; }
inline Action RG(int mb, int peer, int chunk = 0) { return {Kind::kRecvGrad, mb, chunk, peer}; }

inline Schedule make(int pp, int m, int v, std::vector<std::vector<Action>> ranks) {
  return Schedule{"t", Shape{pp, m, v}, std::move(ranks)};
}

// GPipe on two ranks and two micro-batches, written out by hand (schedule.h's example).
inline Schedule gpipe_2x2() {
  return make(2, 2, 1,
              {{F(0), SA(0, 1), F(1), SA(1, 1), RG(0, 1), B(0), RG(1, 1), B(1)},
               {RA(0, 0), F(0), RA(1, 0), F(1), B(0), SG(0, 0), B(1), SG(1, 0)}});
}

}  // namespace partrain::pipeline::testing
