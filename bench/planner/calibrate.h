// The one calibrated constant of the GPU profiles, sustained_clock (the share of the boost
// clock a device holds under a training load), fitted on the calibration half of the
// published runs: per device family (A100-40GB and A100-80GB are one chip), the value that
// minimizes the largest |log(predicted / published)| over that family's calibration rows
// (plus 1% of their mean square, to break ties), by golden-section search over [0.5, 1].
// Everything else in a profile is a datasheet figure, NCCL's constant, a measurement or a
// cited estimate; the held-out half is never looked at.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "bench/planner/published_runs.h"

namespace partrain::bench {

// One row planned once; retimed under other constants.
struct PlannedRun {
  const PublishedRun* run = nullptr;
  planner::HardwareProfile hw;  // profile_of(run)
  Prediction first;
};

// Every asserted row planned with the profiles in `hardware_dir`; errors name the row.
Result<std::vector<PlannedRun>> plan_published(const std::string& hardware_dir);

// "A100" or "H100" (H200 is the H100's chip).
std::string device_family(const std::string& profile);

// sustained_clock per family fitted on the rows of `half`.
std::map<std::string, double> fit_sustained_clock(const std::vector<PlannedRun>& rows, Half half);

// The row's prediction with sustained_clock = `clock`.
Prediction with_clock(const PlannedRun& row, double clock);

}  // namespace partrain::bench
