// The PARTRAIN_* environment of a task (see step_env.h).
#include "step_env.h"

#include <charconv>

#include "job_secret.h"
#include "layout/hostlist.h"
#include "layout/layout.h"
#include "layout/mapping.h"
#include "layout/spec.h"
#include "layout/validate.h"

namespace partrain::spank {
namespace {

std::optional<int> parse_count(const std::string& text) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < 0) {
    return std::nullopt;
  }
  return value;
}

// GPUs the step has on this node: SLURM_GPUS_ON_NODE counts them even when each task is
// bound to one (--gpus-per-task), then the step's GPU list, then what the task sees.
int node_gpus(const StepFacts& f) {
  if (std::optional<int> n = parse_count(f.gpus_on_node)) return *n;
  if (int n = count_devices(f.step_gpus); n > 0) return n;
  return count_devices(f.visible_devices);
}

}  // namespace

int count_devices(const std::string& list) {
  if (list.empty()) return 0;
  int n = 1;
  for (char c : list) n += (c == ',');
  return n;
}

Result<StepEnv> compute_step_env(const std::string& spec_text, const StepFacts& facts,
                                 const PluginArgs& args,
                                 const std::optional<SwitchTree>& switches) {
  Result<ParallelSpec> spec = parse_spec(spec_text);
  if (!spec.is_ok()) return spec.status();
  Result<std::vector<std::string>> nodes = expand_hostlist(facts.node_list, "SLURM_STEP_NODELIST");
  if (!nodes.is_ok()) return nodes.status();
  Result<std::vector<int>> counts =
      expand_task_counts(facts.tasks_per_node, "SLURM_STEP_TASKS_PER_NODE");
  if (!counts.is_ok()) return counts.status();
  if (counts->size() != nodes->size()) {
    return Status::invalid("partrain: SLURM_STEP_TASKS_PER_NODE '" + facts.tasks_per_node +
                           "' lists " + std::to_string(counts->size()) +
                           " nodes but SLURM_STEP_NODELIST '" + facts.node_list + "' has " +
                           std::to_string(nodes->size()) + "; this is a Slurm bug, report it");
  }
  const int num_nodes = static_cast<int>(nodes->size());
  if (facts.node_index < 0 || facts.node_index >= num_nodes ||
      facts.local_task < 0 || facts.local_task >= (*counts)[facts.node_index]) {
    return Status::internal("partrain: task " + std::to_string(facts.local_task) + " on node " +
                            std::to_string(facts.node_index) + " is outside the step (" +
                            facts.node_list + ", " + facts.tasks_per_node + ")");
  }

  const int gpus = node_gpus(facts);
  bool one_per_node = true;
  for (int c : *counts) one_per_node = one_per_node && c == 1;
  StepEnv env;
  env.agent = one_per_node && gpus > 1;

  SlurmView view;
  view.nodes = *nodes;
  view.tasks_per_node = env.agent ? std::vector<int>(nodes->size(), gpus) : *counts;
  view.gpus_per_node = gpus;
  view.nvlink_domain = gpus > 0 ? args.nvlink_domain : 0;
  if (!facts.distribution.empty()) {
    // Only Slurm's own task order depends on it, not where ranks go; plane/arbitrary
    // distributions fall back to block.
    Result<Distribution> d = parse_distribution(facts.distribution);
    if (d.is_ok()) view.distribution = *d;
  }
  view.switches = switches;
  PARTRAIN_RETURN_IF_ERROR(view.check());

  const int world = view.world();
  PARTRAIN_RETURN_IF_ERROR(validate(*spec, ClusterFacts{world, gpus, view.nvlink_domain}));
  Result<Layout> layout = Layout::create(world, *spec);
  if (!layout.is_ok()) return layout.status();
  Result<Mapping> mapping = map_topology_aware(*layout, view);
  if (!mapping.is_ok()) return mapping.status();
  if (!mapping->tp_domain_local) {
    env.warnings.push_back("partrain: some tensor-parallel groups span nodes because the "
                           "tasks per node do not split into whole tp" +
                           std::to_string(layout->tp()) +
                           " groups; give every node a multiple of tp tasks");
  }

  // The ranks this node runs, by local slot.
  std::vector<int> node_ranks(static_cast<size_t>(view.tasks_per_node[facts.node_index]), -1);
  for (int r = 0; r < world; ++r) {
    const TaskSlot& s = mapping->slot_of_rank[static_cast<size_t>(r)];
    if (s.node == facts.node_index) node_ranks[static_cast<size_t>(s.local)] = r;
  }

  auto set = [&env](const std::string& name, const std::string& value) {
    env.vars.emplace_back(name, value);
  };
  auto set_int = [&set](const std::string& name, int value) { set(name, std::to_string(value)); };
  set("PARTRAIN_SPEC", spec_text);
  set_int("PARTRAIN_WORLD", world);
  set_int("PARTRAIN_TP", layout->tp());
  set_int("PARTRAIN_CP", layout->cp());
  set_int("PARTRAIN_PP", layout->pp());
  set_int("PARTRAIN_DP", layout->dp());
  set_int("PARTRAIN_EP", layout->ep());
  std::string list;
  for (int r : node_ranks) list += (list.empty() ? "" : ",") + std::to_string(r);
  set("PARTRAIN_NODE_RANKS", list);
  if (!env.agent) {
    const int rank = node_ranks[static_cast<size_t>(facts.local_task)];
    const RankCoord c = layout->coord(rank);
    set_int("PARTRAIN_RANK", rank);
    set_int("PARTRAIN_TP_RANK", c.tp);
    set_int("PARTRAIN_CP_RANK", c.cp);
    set_int("PARTRAIN_PP_RANK", c.pp);
    set_int("PARTRAIN_DP_RANK", c.dp);
    set_int("PARTRAIN_EP_RANK", c.ep);
    if (gpus > 0) {
      // The CUDA ordinal among the devices this task sees: its own slot when it sees the
      // node's GPUs, 0 when Slurm bound it to one (--gpus-per-task=1, --gpu-bind).
      const int visible = count_devices(facts.visible_devices);
      int device = facts.local_task;
      if (visible == 1) {
        device = 0;
      } else if (visible > 1 && facts.local_task >= visible) {
        device = 0;
        env.warnings.push_back("partrain: task " + std::to_string(facts.local_task) +
                               " sees only " + std::to_string(visible) +
                               " GPUs (CUDA_VISIBLE_DEVICES=" + facts.visible_devices +
                               "); use one GPU per task, e.g. --gpus-per-task=1");
      }
      set_int("PARTRAIN_LOCAL_DEVICE", device);
    }
  }
  const TaskSlot& first = mapping->slot_of_rank[0];
  set("PARTRAIN_COORDINATOR", (*nodes)[static_cast<size_t>(first.node)] + ":" +
                                  std::to_string(coordinator_port(args, facts.job_id)));
  env.state_dir = job_state_dir(args.state_root, facts.job_id);
  set("PARTRAIN_STATE_DIR", env.state_dir);
  return env;
}

}  // namespace partrain::spank
