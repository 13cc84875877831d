// GPipe (Huang et al. 2019): every micro-batch forward, then every micro-batch backward.
// Keeps all m micro-batches' activations; bubble (p-1)/(m+p-1) with uniform stages.
#include <string>
#include <vector>

#include "partrain/schedule_sdk.h"

namespace {

namespace sdk = partrain::sdk;

std::vector<partrain_action_v1_t> gpipe(const sdk::ScheduleArgs& a) {
  sdk::require(a.v == 1, "gpipe: one chunk per rank only (got v=" + std::to_string(a.v) +
                             "); use sched=interleaved:V for virtual stages");
  std::vector<sdk::Compute> order;
  for (int i = 0; i < a.m; ++i) order.push_back(sdk::forward(i));
  for (int i = 0; i < a.m; ++i) order.push_back(sdk::backward(i));
  return sdk::with_transfers(a, order);
}

}  // namespace

PARTRAIN_SCHEDULE_PLUGIN(gpipe, "gpipe", "1.0.0",
                         "GPipe: all forwards, then all backwards (m micro-batches in flight)")
