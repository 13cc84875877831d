// A pipeline schedule as data: for each of pp ranks, the ordered list of actions it runs
// in one optimizer step (torchtitan's per-rank action tables). Placement is the looped one
// of include/partrain/schedule.h: with v chunks per rank there are pp*v stages, and stage
// s = chunk * pp + rank lives on rank s % pp as its chunk s / pp. Micro-batches go forward
// through stages 0..S-1 and backward through S-1..0.
//
//   pp=2, m=2, GPipe (F forward, B backward; sends/receives carry the data between ranks):
//     rank 0: F0 send-act0>1 F1 send-act1>1 recv-grad0<1 B0 recv-grad1<1 B1
//     rank 1: recv-act0<0 F0 recv-act1<0 F1 B0 send-grad0>0 B1 send-grad1>0
//
// Standard library only (plus Status): the runtime, the CLI and tests share it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace partrain::pipeline {

// The same numbers as partrain_action_kind_v1 (include/partrain/schedule.h).
enum class Kind : int32_t {
  kForward = 1,
  kBackward = 2,        // input and weight gradients together
  kBackwardInput = 3,   // input gradient only; the weight gradient follows as kBackwardWeight
  kBackwardWeight = 4,
  kSendActivation = 5,
  kRecvActivation = 6,
  kSendGrad = 7,
  kRecvGrad = 8,
};

struct Action {
  Kind kind = Kind::kForward;
  int mb = 0;     // micro-batch, 0 <= mb < m
  int chunk = 0;  // local chunk (virtual stage of this rank), 0 <= chunk < v
  int peer = -1;  // transfers: the other rank; compute: -1
};

// pp ranks, m micro-batches, v chunks per rank.
struct Shape {
  int pp = 1;
  int m = 1;
  int v = 1;
  int stages() const { return pp * v; }
  int stage(int rank, int chunk) const { return chunk * pp + rank; }
  int rank_of(int stage) const { return stage % pp; }
  int chunk_of(int stage) const { return stage / pp; }
};

struct Schedule {
  std::string name;                         // the schedule's name, for messages
  Shape shape;
  std::vector<std::vector<Action>> ranks;   // ranks[r] = rank r's actions in order
};

bool is_compute(Kind k);
bool is_send(Kind k);
bool is_recv(Kind k);
// A kind the ABI does not define (kinds arrive from plugins as plain integers).
bool is_known(int32_t kind);

// "forward", "backward-input", "send-activation", ...
const char* kind_name(Kind k);

// Short form for timelines: "F3", "B3", "b3" (input), "W3", with ".c" appended when the
// schedule has several chunks per rank ("F3.1").
std::string short_label(const Action& a, int v);

// For messages: "forward mb3 chunk0", "send-activation mb3 chunk0 to rank 1".
std::string describe(const Action& a);

}  // namespace partrain::pipeline
