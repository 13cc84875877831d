// --partrain=auto: the fastest layout of a job that fits and that this version runs on the
// allocation's devices, from search_layouts over the spec's axes only (tp, pp, dp, ep,
// ZeRO, sequence parallelism, schedule; the job file's recompute and micro-batch are kept,
// so the choice is a spec the tasks get as if the user had typed it). One function every
// entry point calls: `partrain plan --auto` (which the SPANK plugin runs at submit),
// `partrain run --partrain=auto`.
//
// Worked example: a 124M GPT-2 with global batch 16 and micro-batch 2 on one node of two
// CPU ranks chooses among dp2 (ZeRO 0-3), tp2 (sp or not) and pp2 (1F1B or interleaved:2),
// and prints
//   partrain: --partrain=auto chose --partrain=dp2: predicted 1.92 s per step, 1.41 GiB per device (of 12.0)
//   partrain: runner-up --partrain=dp2,zero1: 1.92 s per step, 1.35 GiB per device; fits with ...
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/job_config.h"
#include "planner/hardware.h"
#include "planner/plan.h"

namespace partrain::planner {

struct AutoChoice {
  Plan chosen;
  std::optional<Plan> runner_up;
  int considered = 0;  // layouts tried
  int fitting = 0;     // layouts that fit and run
};

// invalid, naming the job, the allocation and the profile, when no layout fits and runs.
Result<AutoChoice> choose_layout(const config::JobConfig& job, const Cluster& cluster, const HardwareProfile& hw);

// The "partrain: ..." lines that report a choice: the chosen spec with its predicted step
// time and memory per device, and the runner-up with why the choice beat it.
std::vector<std::string> describe_choice(const AutoChoice& choice);

}  // namespace partrain::planner
