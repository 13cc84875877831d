// The agent's watchdog over its workers' progress (common/progress.h): each local worker
// writes "STEP PHASE" lines down its own pipe whenever it enters a phase of a step; a rank
// that has written nothing for `timeout` made no progress (stopped with SIGSTOP, stuck in
// a collective or on a hung file system) and the supervise loop ends the job with exit 75
// naming it (supervise.h), instead of waiting out Gloo's or NCCL's own timeouts.
//
// A rank is watched from its first line on (start-up, rendezvous and a checkpoint restore
// are bounded by their own timeouts), and only while it runs. Once one rank is past the
// timeout, the rank named is, among those silent for over half of it, first one the caller
// calls a suspect (supervise.cc: a process stopped or in uninterruptible sleep, read from
// /proc), then one whose last line does not say it waits on its peers (a line ending in
// "\twaiting", common/progress.h: blocked in a collective), then the one silent longest: a
// stopped or hung rank goes quiet, and the peers that wait for it in a collective go quiet
// too, often before it if they reached the collective first (a hang inside a plugin, the
// hung rank running and not in any wait). Worked example, timeout 60 s: rank 0 waiting in "wait for gradient sync" since
// t = 100 s, rank 1 stopped (SIGSTOP) in the same phase at t = 100.4 s; at t = 160.1 s
// both are silent for over 30 s, rank 1 is a suspect, so stalled() names rank 1, step 7,
// silent 59.7 s. Without suspects it would name rank 0, silent longest.
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
    bool waiting = false;       // its last line said it waits on its peers
    std::chrono::milliseconds silent{0};
  };
  // The watched rank (among those `running` says run) to blame once one is silent for longer
  // than `timeout`: a `suspect` silent for over timeout / 2 first, then one not waiting on
  // its peers, else the longest silent; nullopt while none is past the timeout.
  template <typename Running, typename Suspect>
  std::optional<Stall> stalled(std::chrono::milliseconds timeout, Running running, Clock::time_point now,
                               Suspect suspect) const {
    std::optional<Stall> worst;
    int worst_rank_of = -1;  // 2 suspect, 1 not waiting, 0 waiting
    bool past = false;
    for (size_t i = 0; i < entries_.size(); ++i) {
      const Entry& e = entries_[i];
      if (!e.reported || !running(i)) continue;
      const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - e.at);
      if (silent * 2 <= timeout) continue;
      past = past || silent > timeout;
      const int rank_of = suspect(i) ? 2 : e.waiting ? 0 : 1;
      if (worst && (worst_rank_of > rank_of || (worst_rank_of == rank_of && worst->silent >= silent))) continue;
      worst = Stall{e.rank, e.step, e.phase, e.waiting, silent};
      worst_rank_of = rank_of;
    }
    return past ? worst : std::nullopt;
  }
  template <typename Running>
  std::optional<Stall> stalled(std::chrono::milliseconds timeout, Running running, Clock::time_point now) const {
    return stalled(timeout, running, now, [](size_t) { return false; });
  }

 private:
  struct Entry {
    int rank = 0;
    int fd = -1;
    std::string partial;      // bytes of a line not yet complete
    std::string step, phase;  // of the last complete line
    bool waiting = false;     // the last line ended in "\twaiting"
    Clock::time_point at;     // when the last complete line arrived
    bool reported = false;
  };
  std::vector<Entry> entries_;
};

}  // namespace partrain::agent
