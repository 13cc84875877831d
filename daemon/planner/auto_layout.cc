// --partrain=auto (see auto_layout.h).
#include "planner/auto_layout.h"

#include <cstdio>

namespace partrain::planner {
namespace {

std::string summary(const Plan& p) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.4g s per step, %.2f GiB per device (of %.1f)", p.time.total,
                p.memory.total() / (1 << 30), p.capacity / (1 << 30));
  return buf;
}

}  // namespace

Result<AutoChoice> choose_layout(const config::JobConfig& job, const Cluster& cluster, const HardwareProfile& hw) {
  SearchOptions options;
  options.vary_job = false;
  SearchResult r = search_layouts(job, cluster, hw, options);
  if (r.fits.empty()) {
    std::string why;
    if (!r.rejected.empty()) {
      why = "; the closest, --partrain=" + r.rejected.front().spec.to_string() + ", " +
            why_it_loses(r.rejected.front(), r.rejected.front());
    } else if (!r.invalid.empty()) {
      why = "; e.g. --partrain=" + r.invalid.front().first + ": " + r.invalid.front().second;
    }
    return Status::invalid("partrain: --partrain=auto: no layout of " + job.name + " fits and runs on " +
                           std::to_string(cluster.nodes) + " node(s) x " + std::to_string(cluster.gpus_per_node) +
                           " " + (hw.kind == "cpu" ? "CPU ranks" : hw.name) + " (" + std::to_string(r.considered) +
                           " tried" + why + "); use more devices, a smaller micro_batch or recompute, or "
                           "give the layout with --partrain=SPEC");
  }
  AutoChoice c;
  c.chosen = r.fits.front();
  if (r.fits.size() > 1) c.runner_up = r.fits[1];
  c.considered = r.considered;
  c.fitting = static_cast<int>(r.fits.size());
  return c;
}

std::vector<std::string> describe_choice(const AutoChoice& c) {
  std::vector<std::string> lines;
  lines.push_back("partrain: --partrain=auto chose --partrain=" + c.chosen.spec.to_string() + ": predicted " +
                  summary(c.chosen) + "; " + std::to_string(c.fitting) + " of " + std::to_string(c.considered) +
                  " layouts fit and run");
  if (c.runner_up) {
    lines.push_back("partrain: runner-up --partrain=" + c.runner_up->spec.to_string() + ": " + summary(*c.runner_up) +
                    "; " + why_it_loses(*c.runner_up, c.chosen));
  }
  return lines;
}

}  // namespace partrain::planner
