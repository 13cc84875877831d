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

// A self-contained SVG: speedup against ranks (with the ideal line) and loss per step of
// every run.
std::string scaling_svg(const ScalingReport& report, const std::vector<RunSeries>& runs);

}  // namespace partrain::planner
