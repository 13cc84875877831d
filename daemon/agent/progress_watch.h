// The agent's watchdog over its workers' progress (common/progress.h): each local worker
// writes "STEP PHASE" lines down its own pipe whenever it enters a phase of a step; a rank
// that has written nothing for `timeout` made no progress (stopped with SIGSTOP, stuck in
// a collective or on a hung file system) and the supervise loop ends the job with exit 75
// naming it (supervise.h), instead of waiting out Gloo's or NCCL's own timeouts.
//
// A rank is watched from its first line on (start-up, rendezvous and a checkpoint restore
// are bounded by their own timeouts), and only while it runs. When several ranks are
// silent the one silent longest is named: a stopped rank goes quiet first, the peers that
// wait for it in a collective after. Worked example, timeout 60 s: rank 1 stopped in step 7
// while in "backward" at t = 100 s, rank 0 waiting in "wait for gradient sync" since
// t = 100.4 s; at t = 160 s stalled() names rank 1, step 7, backward, silent 60 s.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace partrain::agent {

class ProgressWatch {
 public:
  using Clock = std::chrono::steady_clock;

  // (rank, read end of its pipe) for every local worker; fd -1 is never watched. The
  // descriptors stay the caller's.
  explicit ProgressWatch(const std::vector<std::pair<int, int>>& pipes, Clock::time_point now = Clock::now());

  // Reads what the pipes hold, never blocking; a complete new line is progress at `now`.
  void drain(Clock::time_point now = Clock::now());

  struct Stall {
    int rank = 0;
    std::string step, phase;    // of its last line
    std::chrono::milliseconds silent{0};
  };
  // The watched rank (among those `running` says run) silent for longer than `timeout`,
  // the longest silent first; nullopt when none.
  template <typename Running>
  std::optional<Stall> stalled(std::chrono::milliseconds timeout, Running running, Clock::time_point now) const {
    std::optional<Stall> worst;
    for (size_t i = 0; i < entries_.size(); ++i) {
      const Entry& e = entries_[i];
      if (!e.reported || !running(i)) continue;
      const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - e.at);
      if (silent <= timeout || (worst && worst->silent >= silent)) continue;
      worst = Stall{e.rank, e.step, e.phase, silent};
    }
    return worst;
  }

 private:
  struct Entry {
    int rank = 0;
    int fd = -1;
    std::string partial;      // bytes of a line not yet complete
    std::string step, phase;  // of the last complete line
    Clock::time_point at;     // when the last complete line arrived
    bool reported = false;
  };
  std::vector<Entry> entries_;
};

}  // namespace partrain::agent
