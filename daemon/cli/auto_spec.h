// `partrain run --partrain=auto`: the layout the planner chooses for the job on this
// machine (planner/auto_layout.h), settled before anything starts, and reported.
#pragma once

#include <string>

#include "common/status.h"

namespace partrain::cli {

// The spec --partrain=auto stands for: the job at `job_path` (with `device` over its [job]
// device when given) on one node of max(nproc, 1) ranks, planned with `hardware` (default:
// the cpu profile on CPU ranks; GPU ranks need one named; names looked up in `hardware_dir`
// when given). Prints the choice and the runner-up ("partrain: ..." lines) to stderr.
Result<std::string> auto_spec(const std::string& job_path, int nproc, const std::string& device,
                              const std::string& hardware, const std::string& hardware_dir);

}  // namespace partrain::cli
