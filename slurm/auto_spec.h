// --partrain=auto in the SPANK plugin. At submit (sbatch, or srun outside a job) the plugin
// runs the installed `partrain plan JOB --auto` for the job file the script or command
// names, with the allocation's node count and GPUs per node and the cluster's hardware
// profile (plugstack hardware=), relays its "partrain: ... chose ..." and "runner-up" lines,
// and sets PARTRAIN_AUTO_SPEC in the submitting environment, which Slurm hands to the job
// and its steps. In each task, --partrain=auto then stands for PARTRAIN_AUTO_SPEC, exactly
// as if the user had typed it. The planner stays out of sbatch, srun and slurmstepd: it is
// a separate process, so the plugin still loads no library beyond libc and libstdc++.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "plugin_args.h"
#include "submit_check.h"

namespace partrain::spank {

// The environment variable that carries the choice from submit to the tasks.
inline constexpr const char* kAutoSpecVar = "PARTRAIN_AUTO_SPEC";

// The job file a batch script or command runs: the first word ending in ".toml" after a
// word `partraind` (or a path ending in /partraind), or after `partrain run`. Comment lines
// (# ...) are skipped. "" when there is none.
std::string find_job_file(std::string_view script_or_command);

// The planner's command line: PARTRAIN_CLI plan JOB --auto --nodes N --gpus-per-node G
// --hardware H. invalid, naming what is missing (the hardware profile, the node count, the
// GPUs per node, the job file) and how to give it.
Result<std::vector<std::string>> auto_command(const std::string& job_file, const AllocationFacts& facts,
                                              const PluginArgs& args);

// The spec in the planner's "partrain: --partrain=auto chose --partrain=SPEC: ..." line.
Result<std::string> parse_auto_choice(std::string_view output);

// Runs `argv` (no shell) with PARTRAIN_SITE_CONFIG set to the plugin's site config, and
// returns what it wrote to stdout and stderr (at most 64 KiB); invalid with that text when it
// exits non-zero or cannot start.
Result<std::string> run_planner(const std::vector<std::string>& argv, const PluginArgs& args);

// The compiled-in partrain command (<bindir>/partrain), as installed.
std::string default_partrain_cli();

}  // namespace partrain::spank
