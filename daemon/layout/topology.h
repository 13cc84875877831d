// The cluster as Slurm shows it to a job: its nodes in SLURM_JOB_NODELIST order, tasks
// per node, GPUs and NVLink domains per node, the task distribution, and optionally the
// switch tree of Slurm's topology/tree plugin (topology.conf). From these follow Slurm's
// own task order (SLURM_PROCID -> node, SLURM_LOCALID) and the class of link between
// any two nodes. Part of the layout core: standard library only.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace partrain {

// The switch tree of topology.conf, e.g.
//   SwitchName=s1 Nodes=n[1-4]
//   SwitchName=s2 Nodes=n[5-8]
//   SwitchName=top Switches=s[1-2]
// A leaf switch is one with Nodes=; a node belongs to exactly one leaf.
class SwitchTree {
 public:
  struct Switch {
    std::string name;
    std::vector<std::string> nodes;     // Nodes=, expanded
    std::vector<std::string> children;  // Switches=, expanded
    int line = 0;                       // where it is defined
  };

  // Parses topology.conf text; `file` names it in errors ("topo.conf:3: ...").
  static Result<SwitchTree> parse(std::string_view text, std::string_view file);
  // Reads and parses the file at `path`.
  static Result<SwitchTree> load(const std::string& path);

  const std::vector<Switch>& switches() const { return switches_; }
  // Index of the leaf switch that lists `node`, if any.
  std::optional<int> leaf_of(const std::string& node) const;
  // Position of each leaf in a depth-first walk from the roots (children in listed
  // order), so leaves under one parent switch are adjacent. Indexed by switch index;
  // -1 for switches without nodes.
  const std::vector<int>& leaf_rank() const { return leaf_rank_; }

 private:
  std::vector<Switch> switches_;
  std::map<std::string, int> leaf_of_node_;
  std::vector<int> leaf_rank_;
};

enum class Distribution { kBlock, kCyclic };

// "block" or "cyclic"; Slurm's "block:cyclic" style takes the node level (first part).
Result<Distribution> parse_distribution(std::string_view text);
std::string_view distribution_name(Distribution d);

// Link classes, cheapest first.
enum class LinkClass { kIntraNode = 0, kInterNode = 1, kInterSwitch = 2 };
inline constexpr int kNumLinkClasses = 3;
// "intra_node", "inter_node", "inter_switch".
std::string_view link_class_name(LinkClass c);

// Where Slurm put one task: node index into SlurmView::nodes and SLURM_LOCALID (which is
// also the local GPU it is given).
struct TaskSlot {
  int node = 0;
  int local = 0;
  bool operator==(const TaskSlot&) const = default;
};

struct SlurmView {
  static constexpr int kMaxTasks = 1 << 24;  // far beyond any cluster; keeps sums in int

  std::vector<std::string> nodes;   // SLURM_JOB_NODELIST, expanded, in order
  std::vector<int> tasks_per_node;  // one entry per node (SLURM_TASKS_PER_NODE expanded)
  int gpus_per_node = 0;            // 0 = CPU ranks. Default: 0
  int nvlink_domain = 0;            // GPUs per NVLink domain; 0 = the whole node. Default: 0
  Distribution distribution = Distribution::kBlock;  // Default: block (Slurm's default)
  std::optional<SwitchTree> switches;                // Default: none (one flat network)

  // A uniform allocation: `nodes` nodes named n1..nN, `gpus_per_node` tasks on each.
  static SlurmView uniform(int nodes, int gpus_per_node, Distribution d = Distribution::kBlock);

  int world() const;
  // Devices per NVLink domain actually used for grouping: nvlink_domain, else
  // gpus_per_node, else the node's task count (CPU ranks share the node).
  int domain_size(int node) const;
  // Checks the view is consistent: names unique, one task count per node, no more tasks
  // than GPUs on a node, NVLink domain dividing the GPUs, every node in the switch tree.
  Status check() const;
  // The link between two nodes: same node, same leaf switch (or no tree), or across.
  LinkClass link(int node_a, int node_b) const;
};

// Slurm's task order: element p is where SLURM_PROCID p runs. Block fills each node in
// turn; cyclic deals tasks round-robin over the nodes, skipping full ones.
std::vector<TaskSlot> slurm_task_order(const SlurmView& view);

}  // namespace partrain
