// `partrain plan`: what a layout of a job needs and how fast it runs, before launch.
// make_plan validates the layout (layout/validate.h), derives the micro-batch count
// (config), sizes memory per device (memory.h), counts the bytes each parallel axis moves
// per step on each link class (layout/cost_model.h, ring volumes) and predicts the step
// time from a hardware profile (step_time.h). search_plans enumerates the valid layouts.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/job_config.h"
#include "layout/cost_model.h"
#include "layout/spec.h"
#include "planner/hardware.h"
#include "planner/memory.h"
#include "planner/runtime.h"
#include "planner/step_time.h"

namespace partrain::planner {

struct Cluster {
  int nodes = 1;          // nodes in the allocation. Default: 1
  int gpus_per_node = 1;  // devices (CPU: ranks) per node. Default: 1
  int world() const { return nodes * gpus_per_node; }
};

struct Plan {
  ParallelSpec spec;             // with dp filled in
  PlanLayout layout;
  ModelDims model;
  ParamCounts params;
  Precision precision;
  MemoryBreakdown memory;        // the pipeline stage that needs the most
  std::vector<MemoryBreakdown> stages;  // every stage's rank (tp rank 0), first to last
  double capacity = 0;           // the device's memory
  bool fits = false;             // memory.total() <= capacity
  int64_t global_batch = 0;      // micro_batch x grad_accum x dp
  double bubble = 0;             // idle fraction of a pipelined step
  StepCost traffic;              // bytes per step, per axis and link class (whole cluster)
  StepCost grad_traffic;         // the DP part counted in gradient precision
  Spans spans;                   // where each axis' groups sit
  Runtime runtime;               // what the step time assumes the runtime does
  StepTime time;
  Status runnable;               // ok, or why this version cannot run it on the device
};

// What make_plan assumes beyond the job and the hardware.
struct PlanOptions {
  // What the runtime does. Default: partrain's own on the profile's device
  // (partrain_runtime in runtime.h)
  std::optional<Runtime> runtime;
  // The context plugin; "" = the job's spec item cpimpl=NAME when present, else ring.
  std::string context_plugin;
};

// The context plugin a job asks for: its spec's cpimpl=ring|allgather item, read
// tolerantly (absent or unknown: "ring").
std::string context_plugin(const config::JobConfig& job);

// The job (its [parallelism] already overlaid with the command line's spec) on `cluster`
// with `hw`. Errors (invalid layout, a batch that does not divide) name the fix.
// `same_traffic`, when given, is a plan of the same job and cluster with the same degrees,
// ZeRO stage, schedule and micro-batch (recompute and sequence parallelism move no bytes
// in the cost model): its bytes per step are reused instead of mapped again.
Result<Plan> make_plan(const config::JobConfig& job, const Cluster& cluster,
                       const HardwareProfile& hw, const Plan* same_traffic = nullptr,
                       const PlanOptions& options = {});

// What search_layouts varies.
struct SearchOptions {
  // Also the job file's settings ([model] recompute: the three modes; [training]
  // micro_batch: every divisor of the per-replica batch up to 64); false: the spec's axes
  // only, the job's recompute and micro-batch kept (--partrain=auto, which exports a spec).
  // Default: true
  bool vary_job = true;
};

struct SearchResult {
  std::vector<Plan> fits;      // fit and this version runs them on the device: fastest first
  std::vector<Plan> rejected;  // valid, but too big for the device or not runnable here
  // Layouts the layout core refuses for this job (heads % tp, batch % dp, ...): spec, why.
  std::vector<std::pair<std::string, std::string>> invalid;
  int considered = 0;
};

// Every layout of the job on the cluster (tp within a node, pp dividing the layers, ep
// dividing dp and the experts, ZeRO 0-3 when dp > 1, sequence parallel on and off, 1F1B
// and interleaved:2, and with vary_job the recompute modes and micro-batches), sorted into
// those that fit and run (fastest first), those that do not, and the invalid ones.
SearchResult search_layouts(const config::JobConfig& job, const Cluster& cluster, const HardwareProfile& hw,
                            const SearchOptions& options = {});

// search_layouts(job, cluster, hw).fits; `considered` (optional) receives how many
// layouts were tried.
std::vector<Plan> search_plans(const config::JobConfig& job, const Cluster& cluster,
                               const HardwareProfile& hw, int* considered = nullptr);

// Why `loser` is not chosen over `winner`: "needs 92.1 GiB of 80.0", "this version does not
// run it: ...", or "12.3% slower: 0.31 s more pipeline bubble, 0.12 s more exposed DP
// reduction" (the two parts of the step it loses most on).
std::string why_it_loses(const Plan& loser, const Plan& winner);

// The layout in one line: the spec plus the job-file settings a search varies
// ([model] recompute, [training] micro_batch).
std::string describe(const Plan& plan);

// Why `winner` ranks above `next` (or, without one, what makes it fast): one short line.
std::string why_it_wins(const Plan& winner, const Plan* next);

}  // namespace partrain::planner
