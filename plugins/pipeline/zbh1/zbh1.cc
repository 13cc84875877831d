// ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", the handcrafted schedule
// with 1F1B's memory). The backward splits into the input gradient (b), which the
// previous stage waits for, and the weight gradient (W), which nobody waits for. Rank r
// of p runs 1F1B's order with b in place of B, and delays its weight gradients: the W of
// micro-batch j follows the b of micro-batch j+r, the ones left come last. So the b chain
// back through the pipeline is not held up by W's, and the W's fill what was 1F1B's
// cool-down bubble. Peak in flight as 1F1B (p-r micro-batches before their b; p before
// their W). With F = b = W the bubble is (p-1)/(3m+p-1), a third of 1F1B's idle time.
#include <algorithm>
#include <string>
#include <vector>

#include "partrain/schedule_sdk.h"

namespace {

namespace sdk = partrain::sdk;

std::vector<partrain_action_v1_t> zbh1(const sdk::ScheduleArgs& a) {
  sdk::require(a.v == 1, "zbh1: one chunk per rank only (got v=" + std::to_string(a.v) + ")");
  sdk::require(a.m >= a.pp, "zbh1: needs at least pp micro-batches (m=" + std::to_string(a.m) +
                                " < pp=" + std::to_string(a.pp) +
                                "); raise global_batch or lower micro_batch, or use gpipe");
  const int warmup = a.pp - a.rank - 1;
  std::vector<sdk::Compute> order;
  int next_w = 0;
  auto input_grad = [&](int k) {
    order.push_back(sdk::backward_input(k));
    if (k >= a.rank) order.push_back(sdk::backward_weight(next_w++));
  };
  for (int i = 0; i < warmup; ++i) order.push_back(sdk::forward(i));
  for (int k = 0; k < a.m - warmup; ++k) {
    order.push_back(sdk::forward(warmup + k));
    input_grad(k);
  }
  for (int k = a.m - warmup; k < a.m; ++k) input_grad(k);
  while (next_w < a.m) order.push_back(sdk::backward_weight(next_w++));
  return sdk::with_transfers(a, order);
}

}  // namespace

PARTRAIN_SCHEDULE_PLUGIN(zbh1, "zbh1", "1.0.0",
                         "ZB-H1 zero bubble: split backward, weight grads fill the bubble")
