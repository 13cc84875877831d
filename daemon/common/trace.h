// The step tracer: a Chrome/Perfetto trace ("Trace Event Format", JSON) per rank of the
// steps a user asked for (`partrain run --trace 5-7`), with one lane for compute (data,
// forward, backward, optimizer), one per communicator (each collective, each send/recv
// batch, as it runs on that communicator's thread) and one for checkpoint I/O.
// `partrain trace merge` joins the ranks' files into one that ui.perfetto.dev opens.
//
// Like the logger there is one tracer per process (one worker is one rank). Off by default:
// every call is then one relaxed atomic load, so the instrumented code pays nothing.
// Timestamps are wall-clock microseconds (system_clock), so the ranks of several nodes
// line up as well as their clocks do (NTP: tens of microseconds on a cluster).
//
// At scale: a traced step costs a few hundred bytes per event; tracing 3 steps of a
// 1000-rank job writes 1000 files of tens of kilobytes each to the run folder.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace partrain::trace {

// Which optimizer steps (1-based, as the step lines count them) are traced.
class StepSet {
 public:
  // "5", "5-7", "1,4,10-12". invalid with the text and an example otherwise.
  static Result<StepSet> parse(std::string_view text);
  bool contains(int64_t step) const;
  bool empty() const { return ranges_.empty(); }
  int64_t last() const;  // the highest step in the set

 private:
  std::vector<std::pair<int64_t, int64_t>> ranges_;  // inclusive
};

// The lanes of one rank (Perfetto shows each as a thread row).
enum class Lane { kCompute, kIo, kComm };

// Starts tracing `steps` for this process: events go to `path` (written by flush(), which
// also runs by itself once the last step of the set has ended). `rank` is the Perfetto
// process id, `label` its name ("rank 3 (node n2)").
void configure(const StepSet& steps, std::string path, int rank, std::string label);
// From PARTRAIN_TRACE (a step set) into <run_dir>/trace/rank-<rank>.json; nothing when the
// variable is unset. invalid naming the variable when it does not parse.
Status configure_from_env(const std::string& run_dir, int rank, std::string label);

// The trainer calls these at each optimizer step's start and end (step is 1-based).
void begin_step(int64_t step);
void end_step(int64_t step);
// Is the current step traced?
bool active();

// Wall-clock microseconds, the time base of every event.
int64_t now_us();

// One finished interval on `lane` (for kComm, `group` names the communicator's row);
// `micro_batch` >= 0 is shown with it.
void record(std::string_view name, Lane lane, int64_t start_us, int64_t end_us,
            std::string_view group = {}, int micro_batch = -1);

// Records [construction, destruction), under the step of its construction, when that step
// was traced. `name` must outlive the span (a literal); nothing is allocated when the step
// is not traced.
class Span {
 public:
  explicit Span(std::string_view name, Lane lane = Lane::kCompute, int micro_batch = -1);
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  std::string_view name_;
  Lane lane_;
  int micro_batch_;
  int64_t start_ = -1;
  int64_t step_ = 0;  // the traced step it began in
};

// Writes the events collected so far (rewriting the file). io_error naming the file.
Status flush();

// For tests: forget every setting and event.
void reset();

}  // namespace partrain::trace
