// A worker's progress, told to its agent: each time the rank enters a phase of a step
// (the phases the tracer names: data, forward, backward, wait for gradient sync,
// optimizer, checkpoint ...), one short line "STEP PHASE\n" goes down a pipe the agent
// made for it (PARTRAIN_PROGRESS_FD). The agent's watchdog (agent/supervise.h) reads the
// pipes: a rank whose line has not changed for [agent] progress_timeout made no progress
// (SIGSTOP, a stuck collective, a hung file system) and the job exits 75 naming the rank
// and the phase it is stuck in.
//
// Cheap and safe on the hot path: nothing happens without the variable (a one-rank run,
// tests); a line is written only when the step or phase changed or a second passed since
// the last one; the write is non-blocking (a full pipe drops the line: the agent drains it
// every 50 ms, and a later line carries the same news); a line is far below PIPE_BUF, so
// it arrives whole. Worked example: rank 1 stopped with SIGSTOP in the backward of step 7
// leaves "7 backward" as its last line; after the timeout its agent says "rank 1 made no
// progress for 600 s (step 7, backward)".
#pragma once

#include <cstdint>
#include <string_view>

namespace partrain::progress {

// The environment variable naming the descriptor the agent's pipe is on.
inline constexpr const char* kFdVariable = "PARTRAIN_PROGRESS_FD";

// This rank entered `phase` (kept up to 63 bytes).
void enter(std::string_view phase);

// While a Waiting lives, this rank is blocked on its peers (a collective's or a receive's
// wait, comm/): its lines end in "\twaiting" ("7 wait for gradient sync\twaiting"), and the
// watchdog blames a silent rank that is not waiting (one stuck in its own or a plugin's code)
// before the peers that wait for it (agent/progress_watch.h). Nested and concurrent waits
// count once; without the agent's pipe it costs one load.
class Waiting {
 public:
  Waiting();
  ~Waiting();
  Waiting(const Waiting&) = delete;
  Waiting& operator=(const Waiting&) = delete;

 private:
  bool on_ = false;
};
// This rank began step `step` (the optimizer step being made, 1-based).
void begin_step(int64_t step);

}  // namespace partrain::progress
