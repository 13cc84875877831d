// `partrain report`: how runs of one job on different rank counts compare. From each
// run's per-step metrics: throughput (tokens per step / median step time, the first step
// left out as warm-up), speedup and efficiency against the run with the fewest ranks, as
// strong scaling when every run has the same global batch and weak scaling when every
// rank has the same share of it; and an SVG with the speedup (next to ideal) and the runs'
// loss curves overlaid.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace partrain::planner {

// One run's metrics (<run_dir>/metrics.jsonl), one entry per step.
struct RunSeries {
  std::string name;            // shown in the table and the legend (the run folder)
  int ranks = 1;               // ranks the run used
  double tokens_per_step = 0;  // global batch x seq_len
  std::vector<int64_t> steps;
  std::vector<double> loss;
  std::vector<double> step_ms;
  double val_loss = -1;        // the last validation loss ([data] val_files); < 0: none
  std::vector<int64_t> val_steps;  // the steps that evaluated, and their validation loss
  std::vector<double> val_losses;
};

enum class ScalingKind { kStrong, kWeak, kMixed };
const char* scaling_kind_name(ScalingKind k);

struct ScalingRow {
  std::string name;
  int ranks = 1;
  double tokens_per_step = 0;
  double step_ms = 0;       // median over steps 2.. (step 1 when it is the only one)
  double tokens_per_s = 0;
  double speedup = 1;       // throughput over the baseline's
  double efficiency = 1;    // speedup / (ranks / baseline ranks)
  double final_loss = 0;
  double final_val_loss = -1;  // < 0: the run had no validation
};

struct ScalingReport {
  ScalingKind kind = ScalingKind::kStrong;
  std::vector<ScalingRow> rows;  // by ranks, the baseline (fewest ranks) first
};

// Errors name the run: no steps, a non-positive step time or rank count.
Result<ScalingReport> scaling_report(const std::vector<RunSeries>& runs);

// A self-contained SVG: speedup against ranks on log2 axes (with the ideal line, ticks at
// the runs' rank counts), and every run's training loss per step with its validation loss
// (dots, dashed) where the run evaluated; linear axes ticked at round numbers.
std::string scaling_svg(const ScalingReport& report, const std::vector<RunSeries>& runs);

// Round tick values for a linear axis over [lo, hi]: multiples of a step of 1, 2 or 5 x 10^k
// chosen to give about `target` ticks, every one inside [lo, hi] (whole numbers only when
// `whole`, e.g. steps). E.g. nice_ticks(0.514, 3.7, 5, false) = 1, 1.5, 2, ..., 3.5.
std::vector<double> nice_ticks(double lo, double hi, int target, bool whole);

}  // namespace partrain::planner
