// What the dispatch file (plugin.cc) calls in each Slurm context, and the state they share.
// One plugin instance lives in one process (sbatch, srun or one slurmstepd per step), so
// the state is per process: the plugstack arguments and the --partrain value seen there.
#pragma once

#include <optional>
#include <string>

#include "plugin_args.h"
#include "spank_api.h"

namespace partrain::spank {

struct PluginState {
  PluginArgs args;                  // from plugstack.conf
  std::optional<std::string> spec;  // the --partrain value, when the job has one
};
PluginState& state();

// options.cc: registers the option table (slurm_spank_init, every context but slurmd).
int register_options(spank_t sp);

// allocator.cc: sbatch/salloc/srun after all options, before any allocation, against what
// the command line shows (init_post_opt); srun again once the step's size is known
// (local_user_init). Non-zero refuses the job or step.
int check_at_submit(spank_t sp);
int check_at_launch(spank_t sp);

// remote.cc: the PARTRAIN_* environment of one task (task_init). Always returns 0 for
// problems of the job: a non-zero return would drain the node. When the step's layout is
// refused, kSpankErrorVar holds the reason for the agent to print.
int set_task_env(spank_t sp);
inline constexpr const char* kSpankErrorVar = "PARTRAIN_SPANK_ERROR";

// remote.cc: at the job's end (job_epilog, as root in slurmd, on every node of the job)
// removes the job's secret from its state directory. Always returns 0: a failing epilog
// drains the node; a problem is logged to slurmd's log.
int remove_secret_at_job_end(spank_t sp);

// Writes one "partrain: ..." line through Slurm's logger (the user's terminal in
// sbatch/srun, the task's stderr and slurmd's log in a step). A leading "partrain: " in
// `message` is not repeated.
void report(const std::string& message);

// One "partrain: ..." line to the user's terminal that is not an error (slurm_spank_log:
// printed at every log level in sbatch and srun): --partrain=auto's choice.
void tell(const std::string& message);

// `message` without a leading "partrain: ", to put context in front of it.
std::string unprefixed(const std::string& message);

}  // namespace partrain::spank
