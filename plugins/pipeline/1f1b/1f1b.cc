// 1F1B (PipeDream-flush, Megatron-LM's non-interleaved schedule). Rank r of p:
//   warm-up    p-r-1 forwards
//   steady     one forward, one backward, m-(p-r-1) times
//   cool-down  the p-r-1 backwards left
// At most p-r micro-batches are in flight on rank r (p on stage 0), against GPipe's m, at
// the same bubble (p-1)/(m+p-1).
#include <algorithm>
#include <string>
#include <vector>

#include "partrain/schedule_sdk.h"

namespace {

namespace sdk = partrain::sdk;

std::vector<partrain_action_v1_t> one_f_one_b(const sdk::ScheduleArgs& a) {
  sdk::require(a.v == 1, "1f1b: one chunk per rank only (got v=" + std::to_string(a.v) +
                             "); use sched=interleaved:V for virtual stages");
  sdk::require(a.m >= a.pp, "1f1b: needs at least pp micro-batches (m=" + std::to_string(a.m) +
                                " < pp=" + std::to_string(a.pp) +
                                "); raise global_batch or lower micro_batch, or use gpipe");
  const int warmup = std::min(a.pp - a.rank - 1, a.m);
  std::vector<sdk::Compute> order;
  for (int i = 0; i < warmup; ++i) order.push_back(sdk::forward(i));
  for (int k = 0; k < a.m - warmup; ++k) {
    order.push_back(sdk::forward(warmup + k));
    order.push_back(sdk::backward(k));
  }
  for (int k = a.m - warmup; k < a.m; ++k) order.push_back(sdk::backward(k));
  return sdk::with_transfers(a, order);
}

}  // namespace

PARTRAIN_SCHEDULE_PLUGIN(one_f_one_b, "1f1b", "1.0.0",
                         "1F1B: warm-up, one forward one backward, cool-down (<= p in flight)")
