// What sbatch, salloc and srun let the plugin see of the allocation at submit time, and
// the check of a --partrain spec against it.
//
// In the allocator context (sbatch/salloc) Slurm hands a SPANK plugin no job facts at all,
// so the plugin reads the options it needs from its own command line (and, for sbatch,
// the script's leading #SBATCH lines, as sbatch itself does): node count, task counts and
// GPUs per node. What is not visible is not checked; the remote context checks again
// against the real allocation. No Slurm header is needed.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "layout/spec.h"
#include "plugin_args.h"

namespace partrain::spank {

struct AllocationFacts {
  std::optional<int> nodes;           // -N/--nodes N (a range N-M counts as unknown)
  std::optional<int> tasks;           // -n/--ntasks
  std::optional<int> tasks_per_node;  // --ntasks-per-node
  std::optional<int> gpus_per_node;   // --gpus-per-node=[type:]N or --gres=gpu[:type]:N
  // An option that can make the task count differ from Slurm's default of one task per
  // node, or GPUs given in a form not counted per node (-c, --exclusive, --overcommit,
  // --ntasks-per-core/socket/gpu, --gpus, --gpus-per-task, ...): the world stays unknown
  // unless -n or --ntasks-per-node gives it.
  bool tasks_open = false;
  std::string chdir;                  // -D/--chdir DIR: where the job runs ("" = here)
};

// Scans options up to the first operand (the script or command), which is returned in
// *operand (empty when there is none). Options it does not know are skipped; a value it
// cannot read leaves that fact unknown. Later options override earlier ones, as in Slurm.
AllocationFacts scan_options(const std::vector<std::string>& args, std::string* operand,
                             AllocationFacts base = {});

// The options of a batch script's leading "#SBATCH ..." lines (sbatch stops reading them
// at the first line that is neither a comment nor blank).
std::vector<std::string> sbatch_directives(std::string_view script);

// The number of partrain ranks the facts imply, if they settle it. With GPUs known, a
// job of one task per node (the partraind agent form) or of unknown task count has one
// rank per GPU; otherwise one rank per task. Without GPUs or task options, a job of N
// nodes has Slurm's default of one task per node: N CPU ranks (etc/examples/train.sbatch).
std::optional<int> world_size(const AllocationFacts& facts);

// Checks `spec` against what is known: degrees, world divisibility, an explicit dp, ep
// dividing dp, tp within the NVLink domain (plugstack nvlink_domain= or GPUs per node).
Status check_spec(const ParallelSpec& spec, const AllocationFacts& facts, const PluginArgs& args);

}  // namespace partrain::spank
