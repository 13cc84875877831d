// The PARTRAIN_* environment of one task of a job step: which rank it plays, where its
// peers are, and where the run keeps its state. Computed in every task from what Slurm
// tells the step (node list, tasks per node, GPUs, this task's node and local id) with
// the layout core's topology-aware mapping, so every task reaches the same answer
// without talking to the others, and a cyclic task distribution still keeps each
// tensor-parallel group inside one node. No Slurm header is needed.
//
// Two shapes of step:
//   one task per rank     e.g. srun --ntasks-per-node=4 with 4 GPUs per node: the task is
//                         rank PARTRAIN_RANK and uses GPU PARTRAIN_LOCAL_DEVICE.
//   one agent per node    srun --ntasks-per-node=1 with G > 1 GPUs per node (partraind):
//                         the world has one rank per GPU; the task is the node's agent and
//                         runs the ranks listed in PARTRAIN_NODE_RANKS (no PARTRAIN_RANK).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "layout/topology.h"
#include "plugin_args.h"

namespace partrain::spank {

// What Slurm tells a task about its step (the task's environment and SPANK items).
struct StepFacts {
  unsigned job_id = 0;
  std::string node_list;        // SLURM_STEP_NODELIST, e.g. "n[1-2]"
  std::string tasks_per_node;   // SLURM_STEP_TASKS_PER_NODE, e.g. "4(x2)"
  int node_index = 0;           // this node's index in the node list (S_JOB_NODEID)
  int local_task = 0;           // this task's index on its node (S_TASK_ID, SLURM_LOCALID)
  std::string distribution;     // SLURM_DISTRIBUTION; "" = block
  std::string gpus_on_node;     // SLURM_GPUS_ON_NODE: the step's GPUs on this node
  std::string step_gpus;        // SLURM_STEP_GPUS, e.g. "0,1,2,3"
  std::string visible_devices;  // CUDA_VISIBLE_DEVICES as Slurm set it for this task
};

struct StepEnv {
  std::vector<std::pair<std::string, std::string>> vars;  // in the order they are set
  std::string state_dir;  // also in vars as PARTRAIN_STATE_DIR
  bool agent = false;     // one agent per node (see above)
  // Not errors, but the user should know (e.g. a TP group that had to span nodes).
  std::vector<std::string> warnings;
};

// Computes the environment for --partrain=`spec_text`. `switches` is the parsed
// topology.conf, if the admin named one. Errors name what is wrong and the fix.
Result<StepEnv> compute_step_env(const std::string& spec_text, const StepFacts& facts,
                                 const PluginArgs& args,
                                 const std::optional<SwitchTree>& switches);

// The number of entries of a comma-separated device list ("0,1,2,3" -> 4; "" -> 0).
int count_devices(const std::string& list);

}  // namespace partrain::spank
