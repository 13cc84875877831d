// What a running job reports per step against the planner's model: the model FLOPs per
// token that MFU counts (flops_per_token: 6N plus attention, no recompute) and the peak
// FLOP/s of one rank's device from a hardware profile. `partrain run` and the workers fill
// engine::train::RunOptions with it, so MFU in metrics.jsonl is the planner's MFU, measured.
#pragma once

#include <string>

#include "common/status.h"
#include "engine/options.h"

namespace partrain::planner {

struct RunAccounting {
  double model_flops_per_token = 0;
  double peak_flops_per_rank = 0;  // 0: no profile, no MFU
  std::string profile;             // the profile's name, for the log
};

// `hardware`: a profile name or file (load_hardware, names looked up in `hardware_dir` when
// given), or "" for the device's default: the shipped `cpu` profile on CPU ranks when it can
// be found, none on GPUs (the step line then shows no MFU). invalid, naming the profile, when
// an asked-for profile does not load.
Result<RunAccounting> run_accounting(const engine::ModelOptions& model, const std::string& device,
                                     const std::string& hardware, const std::string& hardware_dir = "");

}  // namespace partrain::planner
