// Slurm's compressed lists, expanded: host lists ("n[1-4,7],gpu[01-02]", as in
// SLURM_JOB_NODELIST and topology.conf) and task counts ("4(x2),2", as in
// SLURM_TASKS_PER_NODE). Part of the layout core: standard library only.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace partrain {

// Expands a Slurm host list in order: "n[1-3,7]" -> n1 n2 n3 n7; "gpu[01-02]" -> gpu01
// gpu02 (the lower bound's width sets the zero padding); "r[1-2]n[1-2]" -> r1n1 r1n2 r2n1
// r2n2. `what` names the list in errors, e.g. "--nodelist" or "topo.conf:3: Nodes=".
Result<std::vector<std::string>> expand_hostlist(std::string_view text,
                                                 std::string_view what = "node list");

// Expands Slurm's task-count form: "4(x2),2" -> 4 4 2.
Result<std::vector<int>> expand_task_counts(std::string_view text,
                                            std::string_view what = "tasks per node");

}  // namespace partrain
