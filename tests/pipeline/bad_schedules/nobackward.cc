// A schedule that forgets work: the last rank never runs the backward of the last
// micro-batch (an off-by-one in its cool-down loop).
#include <vector>

#include "partrain/schedule_sdk.h"

namespace {

namespace sdk = partrain::sdk;

std::vector<partrain_action_v1_t> nobackward(const sdk::ScheduleArgs& a) {
  const int last = a.rank == a.pp - 1 ? a.m - 1 : a.m;
  std::vector<sdk::Compute> order;
  for (int i = 0; i < a.m; ++i) order.push_back(sdk::forward(i));
  for (int i = 0; i < last; ++i) order.push_back(sdk::backward(i));
  return sdk::with_transfers(a, order);
}

}  // namespace

PARTRAIN_SCHEDULE_PLUGIN(nobackward, "nobackward", "0.1.0",
                         "test: the last rank skips the last micro-batch's backward")
