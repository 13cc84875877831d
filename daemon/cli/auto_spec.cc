// --partrain=auto for `partrain run` (see auto_spec.h).
#include "cli/auto_spec.h"

#include <algorithm>
#include <cstdio>

#include "config/job_config.h"
#include "config/site_config.h"
#include "planner/auto_layout.h"

namespace partrain::cli {

Result<std::string> auto_spec(const std::string& job_path, int nproc, const std::string& device,
                              const std::string& hardware, const std::string& hardware_dir) {
  Result<config::SiteConfig> site = config::load_site_config("");
  if (!site) return site.status();
  config::Overrides ov;
  if (!device.empty()) ov.device = device;
  Result<config::JobConfig> job = config::resolve_job(job_path, *site, ov);
  if (!job) return job.status();
  const bool cpu = job->device == "cpu";
  if (!cpu && hardware.empty()) {
    return Status::invalid("partrain: --partrain=auto on GPU ranks needs the planner's model of the device: "
                           "add --hardware PROFILE (e.g. H100-SXM), or give the layout with --partrain=SPEC");
  }
  Result<planner::HardwareProfile> hw = planner::load_hardware(hardware.empty() ? "cpu" : hardware, hardware_dir);
  if (!hw) return hw.status();
  const planner::Cluster cluster{1, std::max(1, nproc)};
  Result<planner::AutoChoice> choice = planner::choose_layout(*job, cluster, *hw);
  if (!choice) return choice.status();
  for (const std::string& line : planner::describe_choice(*choice)) std::fprintf(stderr, "%s\n", line.c_str());
  return choice->chosen.spec.to_string();
}

}  // namespace partrain::cli
