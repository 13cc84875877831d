// Interleaved 1F1B (Narayanan et al. 2021, Megatron-core's
// forward_backward_pipelining_with_interleaving). Each of p ranks holds v chunks; stage
// s = chunk*p + rank. The k-th forward of a rank (k = 0 .. v*m-1) runs
//   chunk (k mod p*v) / p  on micro-batch (k / (p*v)) * p + k mod p,
// i.e. groups of p micro-batches go through chunk 0, then chunk 1, ...; the k-th backward
// the same with the chunk order reversed (v-1-chunk). Rank r of p:
//   warm-up    (p-r-1)*2 + (v-1)*p forwards (all v*m of them when m == p)
//   steady     one forward, one backward
//   cool-down  the backwards left
// Needs m a multiple of p. Bubble (p-1)/(v*m+p-1): v times fewer idle chunk-slots than 1F1B.
#include <algorithm>
#include <string>
#include <vector>

#include "partrain/schedule_sdk.h"

namespace {

namespace sdk = partrain::sdk;

sdk::Compute nth(const sdk::ScheduleArgs& a, int k, bool forward) {
  const int group = a.pp * a.v;
  const int mb = (k / group) * a.pp + k % a.pp;
  int chunk = (k % group) / a.pp;
  if (!forward) chunk = a.v - 1 - chunk;
  return forward ? sdk::forward(mb, chunk) : sdk::backward(mb, chunk);
}

std::vector<partrain_action_v1_t> interleaved(const sdk::ScheduleArgs& a) {
  sdk::require(a.v >= 2, "interleaved: needs at least 2 chunks per rank (sched=interleaved:2); "
                         "with one chunk use sched=1f1b");
  sdk::require(a.m % a.pp == 0,
               "interleaved: the micro-batch count must be a multiple of pp (m=" +
                   std::to_string(a.m) + ", pp=" + std::to_string(a.pp) + "); use m=" +
                   std::to_string((a.m / a.pp + 1) * a.pp) + (a.m >= a.pp ? " or m=" +
                   std::to_string(a.m / a.pp * a.pp) : std::string()));
  const int total = a.m * a.v;
  const int warmup = a.m == a.pp ? total
                                 : std::min((a.pp - a.rank - 1) * 2 + (a.v - 1) * a.pp, total);
  std::vector<sdk::Compute> order;
  for (int k = 0; k < warmup; ++k) order.push_back(nth(a, k, true));
  for (int k = 0; k < total - warmup; ++k) {
    order.push_back(nth(a, warmup + k, true));
    order.push_back(nth(a, k, false));
  }
  for (int k = total - warmup; k < total; ++k) order.push_back(nth(a, k, false));
  return sdk::with_transfers(a, order);
}

}  // namespace

PARTRAIN_SCHEDULE_PLUGIN(interleaved, "interleaved", "1.0.0",
                         "interleaved 1F1B with v chunks per rank (Megatron; m % p == 0)")
