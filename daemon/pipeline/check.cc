// See check.h. The per-rank pass keeps, for each (chunk, micro-batch) of the rank, what has
// happened so far; each rule is a test on that state when an action arrives.
#include "pipeline/check.h"

#include <string>
#include <vector>

#include "pipeline/simulate.h"

namespace partrain::pipeline {
namespace {

struct Cell {
  bool forward = false;
  bool backward = false;  // B or backward-input
  bool split = false;     // the backward was a backward-input
  bool weight = false;    // backward-weight
  bool recv_act = false;
  bool send_act = false;
  bool recv_grad = false;
  bool send_grad = false;
};

class RankChecker {
 public:
  RankChecker(const Schedule& s, int rank)
      : s_(s), sh_(s.shape), rank_(rank), cells_(static_cast<size_t>(sh_.v) * sh_.m) {}

  Status run() {
    const std::vector<Action>& list = s_.ranks[rank_];
    for (pos_ = 0; pos_ < list.size(); ++pos_) {
      PARTRAIN_RETURN_IF_ERROR(step(list[pos_]));
    }
    return finish();
  }

 private:
  Cell& cell(int chunk, int mb) { return cells_[static_cast<size_t>(chunk) * sh_.m + mb]; }
  std::string head() const {
    return "schedule " + s_.name + " (pp=" + std::to_string(sh_.pp) + ", m=" +
           std::to_string(sh_.m) + ", v=" + std::to_string(sh_.v) + "): rank " +
           std::to_string(rank_);
  }
  Status bad(const Action& a, const std::string& what) const {
    return Status::invalid(head() + ", action " + std::to_string(pos_) + " (" + describe(a) +
                           "): " + what);
  }
  Status never(int chunk, int mb, const std::string& what, const std::string& why = "") const {
    return Status::invalid(head() + ": stage " + std::to_string(sh_.stage(rank_, chunk)) +
                           " (chunk " + std::to_string(chunk) + ") " + what + " micro-batch " +
                           std::to_string(mb) + why);
  }
  bool remote(int stage) const { return sh_.rank_of(stage) != rank_; }
  std::string rank_str(int stage) const { return "rank " + std::to_string(sh_.rank_of(stage)); }

  Status step(const Action& a);
  Status transfer(const Action& a, int s, Cell& c);
  Status finish();

  const Schedule& s_;
  const Shape sh_;
  const int rank_;
  std::vector<Cell> cells_;
  size_t pos_ = 0;
};

Status RankChecker::step(const Action& a) {
  if (!is_known(static_cast<int32_t>(a.kind))) {
    return bad(a, "unknown action kind " + std::to_string(static_cast<int32_t>(a.kind)) +
                      " (include/partrain/schedule.h defines 1 to 8)");
  }
  if (a.mb < 0 || a.mb >= sh_.m) {
    return bad(a, "micro-batch " + std::to_string(a.mb) + " outside 0.." +
                      std::to_string(sh_.m - 1));
  }
  if (a.chunk < 0 || a.chunk >= sh_.v) {
    return bad(a, "chunk " + std::to_string(a.chunk) + " outside 0.." + std::to_string(sh_.v - 1));
  }
  const int s = sh_.stage(rank_, a.chunk);
  const int last = sh_.stages() - 1;
  Cell& c = cell(a.chunk, a.mb);
  if (!is_compute(a.kind)) return transfer(a, s, c);
  if (a.peer != -1) return bad(a, "a compute action takes peer -1, not " + std::to_string(a.peer));
  const std::string mb = "micro-batch " + std::to_string(a.mb);
  switch (a.kind) {
    case Kind::kForward:
      if (c.forward) return bad(a, mb + " is forwarded twice on stage " + std::to_string(s));
      if (s > 0 && remote(s - 1) && !c.recv_act) {
        return bad(a, "forward before its input arrived: no recv-activation of " + mb +
                          " from " + rank_str(s - 1) + " (stage " + std::to_string(s - 1) +
                          ") before it");
      }
      if (s > 0 && !remote(s - 1) && !cell(a.chunk - 1, a.mb).forward) {
        return bad(a, "forward of stage " + std::to_string(s) + " before stage " +
                          std::to_string(s - 1) + " forwarded " + mb);
      }
      c.forward = true;
      return Status::ok();
    case Kind::kBackward:
    case Kind::kBackwardInput:
      if (c.backward) return bad(a, mb + " is backwarded twice on stage " + std::to_string(s));
      if (!c.forward) return bad(a, "backward before the forward of " + mb + " on this stage");
      if (s < last && remote(s + 1) && !c.recv_grad) {
        return bad(a, "backward before its output gradient arrived: no recv-grad of " + mb +
                          " from " + rank_str(s + 1) + " (stage " + std::to_string(s + 1) +
                          ") before it");
      }
      if (s < last && !remote(s + 1) && !cell(a.chunk + 1, a.mb).backward) {
        return bad(a, "backward of stage " + std::to_string(s) + " before stage " +
                          std::to_string(s + 1) + " backwarded " + mb);
      }
      c.backward = true;
      c.split = a.kind == Kind::kBackwardInput;
      return Status::ok();
    default:  // kBackwardWeight
      if (c.weight) return bad(a, "the weight gradient of " + mb + " is computed twice");
      if (c.backward && !c.split) {
        return bad(a, "weight gradient after a whole backward of " + mb +
                          ", which computed it already; use backward-input for the first part");
      }
      if (!c.backward) return bad(a, "weight gradient before the backward-input of " + mb);
      c.weight = true;
      return Status::ok();
  }
}

Status RankChecker::transfer(const Action& a, int s, Cell& c) {
  const int last = sh_.stages() - 1;
  const bool act = a.kind == Kind::kSendActivation || a.kind == Kind::kRecvActivation;
  const bool send = is_send(a.kind);
  // Activations go to stage s+1 and come from s-1; gradients the other way.
  const int other = (act == send) ? s + 1 : s - 1;
  if (other < 0 || other > last) {
    return bad(a, "stage " + std::to_string(s) + " has no stage " + std::to_string(other) + " to " +
                      (send ? "send to" : "receive from") +
                      (other < 0 ? " (it is the first)" : " (it is the last)"));
  }
  if (!remote(other)) {
    return bad(a, "stage " + std::to_string(other) + " is on this rank too: nothing to transfer");
  }
  if (a.peer != sh_.rank_of(other)) {
    return bad(a, std::string(act ? "activations" : "gradients") + " of stage " +
                      std::to_string(s) + (send ? " go to " : " come from ") + rank_str(other) +
                      " (stage " + std::to_string(other) + "), not rank " + std::to_string(a.peer));
  }
  const std::string mb = "micro-batch " + std::to_string(a.mb);
  bool& done = act ? (send ? c.send_act : c.recv_act) : (send ? c.send_grad : c.recv_grad);
  if (done) return bad(a, std::string("the same transfer twice for ") + mb);
  if (a.kind == Kind::kSendActivation && !c.forward) {
    return bad(a, "sends the output of " + mb + " before its forward");
  }
  if (a.kind == Kind::kSendGrad && !c.backward) {
    return bad(a, "sends the input gradient of " + mb + " before its backward");
  }
  done = true;
  return Status::ok();
}

Status RankChecker::finish() {
  const int last = sh_.stages() - 1;
  for (int chunk = 0; chunk < sh_.v; ++chunk) {
    const int s = sh_.stage(rank_, chunk);
    for (int mb = 0; mb < sh_.m; ++mb) {
      const Cell& c = cell(chunk, mb);
      if (!c.forward) return never(chunk, mb, "never forwards");
      if (!c.backward) {
        return never(chunk, mb, "never backwards", " (no backward or backward-input)");
      }
      if (c.split && !c.weight) {
        return never(chunk, mb, "never computes the weight gradient of",
                     " (backward-input without backward-weight)");
      }
      if (s < last && remote(s + 1) && !c.send_act) {
        return never(chunk, mb, "never sends to " + rank_str(s + 1) + " the activations of");
      }
      if (s > 0 && remote(s - 1) && !c.send_grad) {
        return never(chunk, mb, "never sends to " + rank_str(s - 1) + " the input gradient of");
      }
    }
  }
  return Status::ok();
}

}  // namespace

Status check(const Schedule& s) {
  const Shape& sh = s.shape;
  const std::string name = "schedule " + s.name;
  if (sh.pp < 1 || sh.m < 1 || sh.v < 1) {
    return Status::invalid(name + ": pp, m and v must be at least 1 (pp=" + std::to_string(sh.pp) +
                           ", m=" + std::to_string(sh.m) + ", v=" + std::to_string(sh.v) + ")");
  }
  if (s.ranks.size() != static_cast<size_t>(sh.pp)) {
    return Status::invalid(name + ": " + std::to_string(s.ranks.size()) +
                           " action lists for pp=" + std::to_string(sh.pp) + " ranks");
  }
  for (int r = 0; r < sh.pp; ++r) {
    PARTRAIN_RETURN_IF_ERROR(RankChecker(s, r).run());
  }
  Result<Timeline> t = simulate(s, Costs{});
  if (!t) {
    return t.status().prefixed(name + " (pp=" + std::to_string(sh.pp) + ", m=" +
                               std::to_string(sh.m) + ", v=" + std::to_string(sh.v) + "): ");
  }
  return Status::ok();
}

}  // namespace partrain::pipeline
