// See simulate.h. Each rank runs ahead as far as it can; a receive stops it until its send
// was posted. Because a rank's clock only moves forward and a receive completes at
// max(own clock, send time + transfer), the order in which ranks are advanced does not
// change the result.
#include "pipeline/simulate.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "pipeline/streams.h"

namespace partrain::pipeline {

Status validate_costs(const Costs& c) {
  auto bad = [](double x) { return !(x > 0) || !std::isfinite(x); };
  if (bad(c.forward) || bad(c.backward) || bad(c.weight)) {
    return Status::invalid("partrain: schedule costs must be positive numbers (forward " +
                           std::to_string(c.forward) + ", backward " + std::to_string(c.backward) +
                           ", weight " + std::to_string(c.weight) + "); e.g. --costs 1,2,1");
  }
  if (!(c.weight < c.backward)) {
    return Status::invalid("partrain: the weight-gradient cost (" + std::to_string(c.weight) +
                           ") must be less than the whole backward's (" +
                           std::to_string(c.backward) + "): W is part of B; e.g. --costs 1,2,1");
  }
  if (!(c.transfer >= 0) || !std::isfinite(c.transfer)) {
    return Status::invalid("partrain: the transfer time must be 0 or more");
  }
  return Status::ok();
}

double cost_of(const Action& a, const Costs& c, int v) {
  switch (a.kind) {
    case Kind::kForward: return c.forward / v;
    case Kind::kBackward: return c.backward / v;
    case Kind::kBackwardInput: return (c.backward - c.weight) / v;
    case Kind::kBackwardWeight: return c.weight / v;
    default: return 0.0;
  }
}

namespace {

// The message for ranks that can no longer move: from the first stuck rank, follows whom
// each one waits for until a rank repeats, naming every wait.
Status deadlock(const Schedule& s, const std::vector<size_t>& pc, const Matching& match) {
  size_t r = 0;
  while (pc[r] >= s.ranks[r].size()) ++r;
  std::vector<bool> seen(s.ranks.size(), false);
  std::string msg = "deadlock: ";
  while (!seen[r]) {
    seen[r] = true;
    const Ref& send = match.send_of[r][pc[r]];
    msg += "rank " + std::to_string(r) + " waits at action " + std::to_string(pc[r]) + " (" +
           describe(s.ranks[r][pc[r]]) + ") for rank " + std::to_string(send.rank) +
           "'s action " + std::to_string(send.pos) + " (" +
           describe(s.ranks[send.rank][send.pos]) + "); ";
    r = static_cast<size_t>(send.rank);
  }
  return Status::invalid(msg + "no rank can proceed: list each receive after the actions "
                               "that its send waits for");
}

}  // namespace

Result<Timeline> simulate(const Schedule& s, const Costs& c) {
  PARTRAIN_RETURN_IF_ERROR(validate_costs(c));
  Result<Matching> match = match_streams(s);
  if (!match) return match.status();
  const size_t p = s.ranks.size();
  const int v = std::max(1, s.shape.v);
  Timeline t;
  t.ranks.resize(p);
  t.busy.assign(p, 0.0);
  std::vector<size_t> pc(p, 0);
  std::vector<double> clock(p, 0.0);
  for (size_t r = 0; r < p; ++r) t.ranks[r].resize(s.ranks[r].size());
  bool progress = true;
  while (progress) {
    progress = false;
    for (size_t r = 0; r < p; ++r) {
      while (pc[r] < s.ranks[r].size()) {
        const Action& a = s.ranks[r][pc[r]];
        Span& span = t.ranks[r][pc[r]];
        if (is_recv(a.kind)) {
          const Ref& send = match->send_of[r][pc[r]];
          if (pc[send.rank] <= send.pos) break;  // not posted yet
          clock[r] = std::max(clock[r], t.ranks[send.rank][send.pos].end + c.transfer);
          span = {clock[r], clock[r]};
        } else {
          const double d = cost_of(a, c, v);
          span = {clock[r], clock[r] + d};
          clock[r] += d;
          t.busy[r] += d;
        }
        ++pc[r];
        progress = true;
      }
    }
  }
  for (size_t r = 0; r < p; ++r) {
    if (pc[r] < s.ranks[r].size()) {
      return deadlock(s, pc, *match);
    }
  }
  double sum = 0;
  for (size_t r = 0; r < p; ++r) {
    t.makespan = std::max(t.makespan, clock[r]);
    sum += t.busy[r];
  }
  t.bubble = t.makespan > 0 ? 1.0 - sum / (static_cast<double>(p) * t.makespan) : 0.0;
  return t;
}

std::vector<InFlight> peak_in_flight(const Schedule& s) {
  std::vector<InFlight> out(s.ranks.size());
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    int act = 0;
    int held = 0;
    for (const Action& a : s.ranks[r]) {
      switch (a.kind) {
        case Kind::kForward: ++act; ++held; break;
        case Kind::kBackward: --act; --held; break;
        case Kind::kBackwardInput: --act; break;
        case Kind::kBackwardWeight: --held; break;
        default: break;
      }
      out[r].activations = std::max(out[r].activations, act);
      out[r].held = std::max(out[r].held, held);
    }
  }
  return out;
}

}  // namespace partrain::pipeline
