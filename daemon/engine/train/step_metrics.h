// One optimizer step's numbers, as the loop writes them to metrics.jsonl and the step line.
// Every layout fills the same struct: a parallel axis adds its collectives with
// StepMetrics::add_comm, the pipeline its bubble, the store its save stall.
#pragma once

#include <array>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"
#include "metrics/tb_writer.h"

namespace partrain::engine::train {

// The parallel axes whose collectives a step reports, in metrics.jsonl order; the names
// are the key prefixes (`dp_comm_ms`, `dp_exposed_ms`, ...). An axis joins by adding its
// collectives with StepMetrics::add_comm.
enum class CommAxis { kDp, kTp, kPp, kEp, kCp };
inline constexpr int kNumCommAxes = 5;
inline const char* comm_axis_name(CommAxis a) {
  constexpr const char* kNames[kNumCommAxes] = {"dp", "tp", "pp", "ep", "cp"};
  return kNames[static_cast<int>(a)];
}

// One axis' collectives in a step. comm_ms: the time they took (dp: first started to last
// finished; tp: the time inside them; cp: the time K/V transfers were in flight, each from
// its start to the end of its wait); exposed_ms: the part this rank waited for them, not hidden behind compute
// (<= comm_ms); bytes: what this rank put into them (dp: the data plugin's count, e.g. 4 bytes
// per gradient element for dp's all-reduce; 0 when the axis does not count).
struct AxisComm {
  double comm_ms = 0, exposed_ms = 0;
  int collectives = 0;
  uint64_t bytes = 0;
};

struct StepMetrics {
  int64_t step = 0;        // 1-based
  double time = 0;         // wall clock at the step's end, seconds since the Unix epoch
  double loss = 0;         // mean over the global batch (cross-entropy + MoE aux)
  double val_loss = -1;    // validation cross-entropy after this step; < 0: not evaluated
  float lr = 0;
  float grad_norm = 0;     // before clipping
  int64_t tokens = 0;      // tokens trained on so far, this step included
  double step_ms = 0, fwd_ms = 0, bwd_ms = 0, opt_ms = 0;
  double data_ms = 0;      // reading the step's samples (the data-loading share of step_ms)
  // The layout's degrees, for the keys that only a parallel run writes.
  int dp = 1, tp = 1, pp = 1, ep = 1, cp = 1;
  // Collectives of the step, per axis and in total: comm_ms, exposed_ms and collectives
  // are the sums over the axes (add_comm keeps them so).
  std::array<AxisComm, kNumCommAxes> axes{};
  double comm_ms = 0, exposed_ms = 0;
  int collectives = 0;
  void add_comm(CommAxis a, double comm, double exposed, int count, uint64_t bytes = 0) {
    AxisComm& x = axes[static_cast<size_t>(a)];
    x.bytes += bytes;
    x.comm_ms += comm;
    x.exposed_ms += exposed;
    x.collectives += count;
    comm_ms += comm;
    exposed_ms += exposed;
    collectives += count;
  }
  // Pipeline (pp > 1): the measured bubble, 1 - sum(busy) / (pp x makespan) over the stages'
  // action timelines.
  double bubble_share = 0;
  // A checkpoint saved after this step: how long training waited for it and how fast
  // the last finished shard was written (0 when none; -1 when the first asynchronous save
  // is still being written, so no rate is known yet).
  double save_stall_ms = 0;
  double save_mb_per_s = 0;
  // The step after an asynchronous save on host memory: how long its optimizer update
  // waited for that save's background copy of the state (0 when it did not wait).
  double save_wait_ms = 0;
  // Throughput of the step: tokens/s of the job and per rank, and the model FLOPs
  // utilisation (0 when the run has no FLOP count or peak; see RunOptions).
  double tokens_per_s = 0, tokens_per_s_per_rank = 0, mfu = 0;
  // MoE models only (experts > 0): the step's routing over the global batch (the hooks
  // sum it over the groups): kept (token, expert) rows per [MoE block][expert], the
  // choices dropped beyond capacity, and the mean auxiliary loss (part of `loss`).
  std::vector<int64_t> expert_tokens;
  int64_t dropped_tokens = 0;
  double aux_loss = 0;
  int experts = 0;  // E, to print expert_tokens per block; 0 for a dense model
  // This rank's peak bytes per memory category so far (engine/backend.h MemoryStats).
  std::array<size_t, kNumMemCategories> peak_bytes{};
};

// The run folder's lock: RUN_DIR/.lock, held with flock(2) by the one process that writes
// the run's metrics.jsonl (the trainer of rank 0) while it runs, so that two jobs sharing a
// run folder, even with different checkpoint folders, never append to one metrics.jsonl
// (issue 31, item 25). The file says who holds it ("pid 4242 on n1"); the kernel releases
// the lock when the holder exits, however it ends.
class RunFolderLock {
 public:
  // Takes the lock; invalid naming the folder and its holder when another process has it.
  static Result<std::unique_ptr<RunFolderLock>> take(const std::string& run_dir);
  ~RunFolderLock();
  RunFolderLock(const RunFolderLock&) = delete;
  RunFolderLock& operator=(const RunFolderLock&) = delete;

 private:
  explicit RunFolderLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// One metrics.jsonl line (no trailing newline), its wall-clock `time` included. The collective fields only when the run is
// parallel or some axis had collectives, `<axis>_comm_ms` / `<axis>_exposed_ms` only for
// the axes that had some, `<axis>_bytes` only for those that counted bytes, `pp` and `bubble_share` only when pp > 1.
std::string metrics_json(const StepMetrics& m);
// The step line's tail after its throughput: the bubble, MoE routing, collective time and
// its exposed part per axis, checkpoint stall; "" when there is none.
std::string step_summary(const StepMetrics& m);
// The step's scalars as TensorBoard plots them (train/loss, train/lr, train/grad_norm,
// perf/tokens_per_s, perf/mfu, perf/step_ms, memory/peak_mib/<category>, comm/<axis>_ms and
// comm/<axis>_exposed_ms, moe/aux_loss and moe/dropped_tokens, pp/bubble_share).
Status write_tensorboard(metrics::TbWriter& tb, const StepMetrics& m);
// Opens metrics.jsonl for appending: nothing an earlier start wrote is ever rewritten. When
// the file already holds lines, this start first appends a restart marker with the same
// wall-clock `time` as the step lines (seconds since the Unix epoch),
//   {"event":"restart","resumed_at_step":20,"time":1769860800.000}
// and a reader takes the lines of steps after 20 written before the marker (a crash's,
// after its last checkpoint) as replaced by the lines that follow it. A step's line is
// written after its save (it reports the save), so a crash between the commit and the line
// would leave a hole at the resumed step: the line as it stood before the save
// (write_pending_metrics, PATH.pending) is appended first, before the marker.
// Only the last MiB of the file is read (a 1 GiB metrics.jsonl costs a start nothing), and a
// metrics.jsonl that is no regular file (a FIFO, /dev/full) is refused naming it.
// A write that fails (a full disk) is an error naming the file, for every line,
// as for the TensorBoard file (issue 31, item 21): the run ends with exit 1, never with an
// empty or cut metrics.jsonl and exit 0.
Status open_metrics(const std::string& path, int64_t resumed_at, std::ofstream* out);
Status write_pending_metrics(const std::string& path, const std::string& line);
// Removes PATH.pending once the step's line is in PATH (it is needed only in between).
void drop_pending_metrics(const std::string& path);
// Appends `line` and a newline to `out` (the file at `path`) and flushes: an io_error naming
// the file and the system's reason when that fails.
Status append_metrics(std::ofstream& out, const std::string& path, const std::string& line);

}  // namespace partrain::engine::train
