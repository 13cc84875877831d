// Whether this version of partrain can run a layout on a device: one function that
// `partrain plan` (which prints the reason next to a plan) and `partrain plan --search`
// (which ranks only runnable layouts) both call, so the planner never recommends what would
// be refused. It asks, in order: the agent's refusals (config::check_supported: cp, the
// compositions, tp and pp on GPUs), the table below (runnable.cc, kStrategies: one row per
// strategy with the devices its plugins run on; flip a row as a strategy arrives on GPUs),
// and the workers' even split of the layers over pp x virtual stages (a plan splits them by
// cost, so it can plan layouts the workers cannot run yet).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "config/job_config.h"
#include "layout/spec.h"

namespace partrain::planner {

// One strategy of a layout and where it runs.
struct StrategySupport {
  const char* name;  // as the spec names it: "dp", "zero1", "tp", "sp", "pp", "ep", "cp"
  bool cpu;          // runs on CPU ranks
  bool cuda;         // runs on GPU ranks
};

// The table, for tests and documentation.
const std::vector<StrategySupport>& strategy_support();

// The strategies `spec` uses (dp only when it has more than one rank).
std::vector<std::string> strategies_of(const ParallelSpec& spec);

// ok, or invalid naming the first strategy or composition `device` ("cpu" or "cuda")
// cannot run and what to do instead. `spec` has dp filled in; `job` supplies the model
// (the layer split over pp x virtual stages).
Status runnable(const ParallelSpec& spec, const config::JobConfig& job, const std::string& device);

}  // namespace partrain::planner
