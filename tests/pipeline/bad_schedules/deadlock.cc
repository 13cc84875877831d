// A schedule with a classic bug: rank 0 runs its forwards but holds their activations back
// until the first gradient has come in, which cannot come before they were sent.
#include <vector>

#include "partrain/schedule_sdk.h"

namespace {

namespace sdk = partrain::sdk;

std::vector<partrain_action_v1_t> deadlock(const sdk::ScheduleArgs& a) {
  std::vector<sdk::Compute> order;
  for (int i = 0; i < a.m; ++i) order.push_back(sdk::forward(i));
  for (int i = 0; i < a.m; ++i) order.push_back(sdk::backward(i));
  std::vector<partrain_action_v1_t> list = sdk::with_transfers(a, order);
  if (a.rank != 0 || a.pp == 1) return list;
  // Rank 0: every send-activation moved, in order, to just after the first recv-grad.
  std::vector<partrain_action_v1_t> sends, out;
  for (const partrain_action_v1_t& x : list) {
    if (x.kind == PARTRAIN_ACTION_SEND_ACTIVATION) sends.push_back(x);
  }
  bool flushed = false;
  for (const partrain_action_v1_t& x : list) {
    if (x.kind == PARTRAIN_ACTION_SEND_ACTIVATION) continue;
    out.push_back(x);
    if (!flushed && x.kind == PARTRAIN_ACTION_RECV_GRAD) {
      out.insert(out.end(), sends.begin(), sends.end());
      flushed = true;
    }
  }
  return out;
}

}  // namespace

PARTRAIN_SCHEDULE_PLUGIN(deadlock, "deadlock", "0.1.0",
                         "test: rank 0 waits for a gradient before sending its activations")
