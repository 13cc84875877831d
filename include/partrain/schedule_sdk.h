// C++ side of the pipeline-schedule ABI (schedule.h). Write a function that returns one
// rank's action list, then one line exports it:
//
//   std::vector<partrain_action_v1_t> my_schedule(const partrain::sdk::ScheduleArgs& a) {
//     if (a.m < a.pp) throw partrain::sdk::Error(PARTRAIN_EINVAL, "myschedule: ...");
//     std::vector<partrain::sdk::Compute> order;       // this rank's compute, in order
//     for (int i = 0; i < a.m; ++i) order.push_back(partrain::sdk::forward(i));
//     ...
//     return partrain::sdk::with_transfers(a, order);  // adds the sends and receives
//   }
//   PARTRAIN_SCHEDULE_PLUGIN(my_schedule, "myschedule", "1.0.0", "what it does")
//
// The macro defines the exported `partrain_schedule_v1` struct; every call is wrapped in
// try/catch so no exception crosses the C boundary (an sdk::Error picks the code).
// with_transfers is optional: a plugin may list its sends and receives itself.
//
// Header-only, C++17, standard library only: a plugin links nothing of partrain.
#ifndef PARTRAIN_SCHEDULE_SDK_H_
#define PARTRAIN_SCHEDULE_SDK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "partrain/sdk.h" /* sdk::Error, detail::guarded */
#include "partrain/schedule.h"

namespace partrain::sdk {

// What build() was asked for.
struct ScheduleArgs {
  int pp = 1;    // ranks in the pipeline
  int m = 1;     // micro-batches per step
  int v = 1;     // chunks (virtual stages) per rank
  int rank = 0;  // whose list to build
  int stages() const { return pp * v; }
  // The global stage of this rank's `chunk` (schedule.h: chunk * pp + rank).
  int stage(int chunk) const { return chunk * pp + rank; }
};

// One compute action of a rank's order (no peer).
struct Compute {
  int kind = PARTRAIN_ACTION_FORWARD;
  int mb = 0;
  int chunk = 0;
};
inline Compute forward(int mb, int chunk = 0) { return {PARTRAIN_ACTION_FORWARD, mb, chunk}; }
inline Compute backward(int mb, int chunk = 0) { return {PARTRAIN_ACTION_BACKWARD, mb, chunk}; }
inline Compute backward_input(int mb, int chunk = 0) {
  return {PARTRAIN_ACTION_BACKWARD_INPUT, mb, chunk};
}
inline Compute backward_weight(int mb, int chunk = 0) {
  return {PARTRAIN_ACTION_BACKWARD_WEIGHT, mb, chunk};
}

// The compute order with its transfers: a receive right before each compute action whose
// input comes from another rank, a send right after each one whose output goes to
// another rank. Since sends never block (schedule.h), this adds no deadlock the compute
// order does not already have, and both sides list each link's transfers in the same
// order whenever the ranks' compute orders agree on it.
inline std::vector<partrain_action_v1_t> with_transfers(const ScheduleArgs& a,
                                                        const std::vector<Compute>& order) {
  std::vector<partrain_action_v1_t> out;
  out.reserve(order.size() * 3);
  const int last = a.stages() - 1;
  auto rank_of = [&](int stage) { return stage % a.pp; };
  auto push = [&](int kind, const Compute& c, int peer) {
    out.push_back(partrain_action_v1_t{kind, c.mb, c.chunk, peer});
  };
  for (const Compute& c : order) {
    const int s = a.stage(c.chunk);
    const bool fwd = c.kind == PARTRAIN_ACTION_FORWARD;
    const bool bwd = c.kind == PARTRAIN_ACTION_BACKWARD || c.kind == PARTRAIN_ACTION_BACKWARD_INPUT;
    // Neighbours on this same rank (pp == 1) exchange nothing.
    if (fwd && s > 0 && rank_of(s - 1) != a.rank) {
      push(PARTRAIN_ACTION_RECV_ACTIVATION, c, rank_of(s - 1));
    }
    if (bwd && s < last && rank_of(s + 1) != a.rank) {
      push(PARTRAIN_ACTION_RECV_GRAD, c, rank_of(s + 1));
    }
    push(c.kind, c, -1);
    if (fwd && s < last && rank_of(s + 1) != a.rank) {
      push(PARTRAIN_ACTION_SEND_ACTIVATION, c, rank_of(s + 1));
    }
    if (bwd && s > 0 && rank_of(s - 1) != a.rank) {
      push(PARTRAIN_ACTION_SEND_GRAD, c, rank_of(s - 1));
    }
  }
  return out;
}

// Throws Error(PARTRAIN_EINVAL, message) unless ok.
inline void require(bool ok, const std::string& message) {
  if (!ok) throw Error(PARTRAIN_EINVAL, message);
}

namespace detail {

template <std::vector<partrain_action_v1_t> (*Build)(const ScheduleArgs&)>
struct ScheduleTrampoline {
  static int build(int32_t pp, int32_t m, int32_t v, int32_t rank, partrain_action_v1_t* actions,
                   size_t capacity, size_t* count, char* err, size_t err_len) noexcept {
    return guarded(err, err_len, [&] {
      require(count != nullptr, "build: count is NULL");
      require(pp >= 1 && m >= 1 && v >= 1,
              "build: pp, m and v must be at least 1 (got pp=" + std::to_string(pp) +
                  " m=" + std::to_string(m) + " v=" + std::to_string(v) + ")");
      require(rank >= 0 && rank < pp, "build: rank " + std::to_string(rank) +
                                          " outside 0.." + std::to_string(pp - 1));
      const std::vector<partrain_action_v1_t> list = Build(ScheduleArgs{pp, m, v, rank});
      if (actions != nullptr) {
        require(capacity >= list.size(), "build: capacity " + std::to_string(capacity) +
                                             " is too small for " + std::to_string(list.size()) +
                                             " actions");
        for (size_t i = 0; i < list.size(); ++i) actions[i] = list[i];
      }
      *count = list.size();
    });
  }
};

}  // namespace detail
}  // namespace partrain::sdk

// Exports FUNCTION (std::vector<partrain_action_v1_t> FUNCTION(const sdk::ScheduleArgs&))
// as the plugin's partrain_schedule_v1. Use once per shared object, at namespace scope.
#define PARTRAIN_SCHEDULE_PLUGIN(FUNCTION, NAME, VERSION, DESCRIPTION)                      \
  extern "C" __attribute__((visibility("default")))                                        \
  const partrain_schedule_v1_t partrain_schedule_v1;                                      \
  extern "C" const partrain_schedule_v1_t partrain_schedule_v1 = {                        \
      PARTRAIN_SCHEDULE_ABI_VERSION,                                                       \
      NAME,                                                                                \
      VERSION,                                                                             \
      DESCRIPTION,                                                                         \
      &::partrain::sdk::detail::ScheduleTrampoline<&FUNCTION>::build,                      \
  };

#endif  // PARTRAIN_SCHEDULE_SDK_H_
