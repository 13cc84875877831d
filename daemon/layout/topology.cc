// topology.conf parsing, the Slurm view's checks, and Slurm's task order (topology.h).
#include "layout/topology.h"

#include <algorithm>
#include <functional>
#include <set>

#include "common/read_file.h"
#include "layout/hostlist.h"

namespace partrain {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

Status line_error(std::string_view file, int line, const std::string& why) {
  return Status::invalid("partrain: " + std::string(file) + ":" + std::to_string(line) + ": " +
                         why);
}

// Splits a line into whitespace-separated words.
std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

}  // namespace

Result<SwitchTree> SwitchTree::parse(std::string_view text, std::string_view file) {
  SwitchTree tree;
  std::map<std::string, int> index;  // switch name -> index
  std::map<std::string, int> parent_line;  // child switch -> line that lists it
  int line_no = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    std::vector<std::string_view> items = words(line);
    if (items.empty()) continue;
    Switch sw;
    sw.line = line_no;
    bool has_nodes = false;
    bool has_switches = false;
    for (size_t i = 0; i < items.size(); ++i) {
      std::string_view item = items[i];
      size_t eq = item.find('=');
      std::string key = lower(item.substr(0, eq));
      std::string_view value = eq == std::string_view::npos ? "" : item.substr(eq + 1);
      if (i == 0 && key != "switchname") {
        return line_error(file, line_no,
                          "expected 'SwitchName=NAME' first, got '" + std::string(item) +
                              "'; partrain reads the topology/tree form "
                              "(SwitchName=s1 Nodes=n[1-4])");
      }
      if (eq == std::string_view::npos || value.empty()) {
        return line_error(file, line_no, "'" + std::string(item) +
                                             "' needs a value; write KEY=VALUE, e.g. "
                                             "SwitchName=s1");
      }
      if (key == "switchname") {
        if (i != 0) {
          return line_error(file, line_no, "a second SwitchName= on one line; put each switch "
                                           "on its own line");
        }
        sw.name = std::string(value);
      } else if (key == "nodes" || key == "switches") {
        bool& seen = key == "nodes" ? has_nodes : has_switches;
        if (seen) {
          return line_error(file, line_no, "'" + std::string(item.substr(0, eq)) +
                                               "=' is given twice; list all names in one");
        }
        seen = true;
        std::string what = std::string(file) + ":" + std::to_string(line_no) + ": " +
                           std::string(item.substr(0, eq + 1));
        Result<std::vector<std::string>> names = expand_hostlist(value, what);
        if (!names.is_ok()) return names.status();
        (key == "nodes" ? sw.nodes : sw.children) = std::move(names).value();
      } else if (key == "linkspeed") {
        // Slurm's relative link speed; partrain ranks links by class only.
      } else {
        return line_error(file, line_no, "unknown key '" + std::string(item.substr(0, eq)) +
                                             "'; a switch line has SwitchName=, Nodes=, "
                                             "Switches= and LinkSpeed=");
      }
    }
    if (!has_nodes && !has_switches) {
      return line_error(file, line_no, "switch '" + sw.name +
                                           "' has neither Nodes= nor Switches=; add one");
    }
    if (auto it = index.find(sw.name); it != index.end()) {
      return line_error(file, line_no, "switch '" + sw.name + "' is already defined on line " +
                                           std::to_string(tree.switches_[it->second].line) +
                                           "; give each switch one line");
    }
    for (const std::string& node : sw.nodes) {
      if (auto it = tree.leaf_of_node_.find(node); it != tree.leaf_of_node_.end()) {
        // This very line (the switch is not stored yet) named it twice: e.g. Nodes=b[2,2].
        if (it->second == static_cast<int>(tree.switches_.size())) {
          return line_error(file, line_no, "node '" + node + "' is listed twice in Nodes=; list it once");
        }
        return line_error(file, line_no, "node '" + node + "' is already under switch '" +
                                             tree.switches_[it->second].name + "' (line " +
                                             std::to_string(tree.switches_[it->second].line) +
                                             "); a node hangs off one leaf switch");
      }
      tree.leaf_of_node_[node] = static_cast<int>(tree.switches_.size());
    }
    for (const std::string& child : sw.children) {
      if (auto it = parent_line.find(child); it != parent_line.end()) {
        return line_error(file, line_no, "switch '" + child + "' already has a parent (line " +
                                             std::to_string(it->second) +
                                             "); a switch has one parent");
      }
      parent_line[child] = line_no;
    }
    index[sw.name] = static_cast<int>(tree.switches_.size());
    tree.switches_.push_back(std::move(sw));
  }
  if (tree.switches_.empty()) {
    return Status::invalid("partrain: " + std::string(file) +
                           ": no switches; add lines like 'SwitchName=s1 Nodes=n[1-4]'");
  }
  for (const Switch& sw : tree.switches_) {
    for (const std::string& child : sw.children) {
      if (!index.count(child)) {
        return line_error(file, sw.line, "switch '" + sw.name + "' lists unknown switch '" +
                                             child + "'; define it with SwitchName=" + child);
      }
    }
  }
  // Depth-first walk from the roots (switches nobody lists) in file order; a switch not
  // reached from any root is on a cycle.
  tree.leaf_rank_.assign(tree.switches_.size(), -1);
  std::vector<bool> visited(tree.switches_.size(), false);
  int next_leaf = 0;
  std::function<void(int)> walk = [&](int s) {
    visited[s] = true;
    if (!tree.switches_[s].nodes.empty()) tree.leaf_rank_[s] = next_leaf++;
    for (const std::string& child : tree.switches_[s].children) walk(index[child]);
  };
  for (size_t s = 0; s < tree.switches_.size(); ++s) {
    if (!parent_line.count(tree.switches_[s].name)) walk(static_cast<int>(s));
  }
  for (size_t s = 0; s < tree.switches_.size(); ++s) {
    if (!visited[s]) {
      return line_error(file, tree.switches_[s].line,
                        "switch '" + tree.switches_[s].name +
                            "' is part of a cycle of Switches=; the switches must form a tree");
    }
  }
  return tree;
}

Result<SwitchTree> SwitchTree::load(const std::string& path) {
  // Slurm's topology.conf of the largest cluster is kilobytes; a FIFO or /dev/zero is
  // refused at once instead of blocking or filling memory.
  constexpr size_t kMaxTopologyBytes = size_t{16} << 20;
  Result<std::string> text = read_regular_file(path, "topology file", kMaxTopologyBytes);
  if (!text && text.status().code() == StatusCode::kNotFound) {
    return Status::not_found("partrain: cannot read topology file '" + path +
                             "'; check the path given to --topology");
  }
  if (!text) return text.status().prefixed("partrain: ");
  return parse(*text, path);
}

std::optional<int> SwitchTree::leaf_of(const std::string& node) const {
  auto it = leaf_of_node_.find(node);
  if (it == leaf_of_node_.end()) return std::nullopt;
  return it->second;
}

Result<Distribution> parse_distribution(std::string_view text) {
  std::string_view node_level = text.substr(0, text.find(':'));
  if (node_level == "block") return Distribution::kBlock;
  if (node_level == "cyclic") return Distribution::kCyclic;
  return Status::invalid("partrain: task distribution '" + std::string(text) +
                         "' is not supported; use block or cyclic");
}

std::string_view distribution_name(Distribution d) {
  return d == Distribution::kBlock ? "block" : "cyclic";
}

std::string_view link_class_name(LinkClass c) {
  switch (c) {
    case LinkClass::kIntraNode: return "intra_node";
    case LinkClass::kInterNode: return "inter_node";
    case LinkClass::kInterSwitch: return "inter_switch";
  }
  return "?";
}

SlurmView SlurmView::uniform(int nodes, int gpus_per_node, Distribution d) {
  SlurmView v;
  for (int n = 1; n <= nodes; ++n) v.nodes.push_back("n" + std::to_string(n));
  v.tasks_per_node.assign(static_cast<size_t>(std::max(nodes, 0)), gpus_per_node);
  v.gpus_per_node = gpus_per_node;
  v.distribution = d;
  return v;
}

int SlurmView::world() const {
  int w = 0;
  for (int t : tasks_per_node) w += t;
  return w;
}

int SlurmView::domain_size(int node) const {
  if (nvlink_domain > 0) return nvlink_domain;
  if (gpus_per_node > 0) return gpus_per_node;
  return std::max(tasks_per_node[node], 1);
}

Status SlurmView::check() const {
  if (nodes.empty()) return Status::invalid("partrain: the job has no nodes; give at least one");
  if (tasks_per_node.size() != nodes.size()) {
    return Status::invalid("partrain: " + std::to_string(tasks_per_node.size()) +
                           " task counts for " + std::to_string(nodes.size()) +
                           " nodes; give one count per node, e.g. 4(x" +
                           std::to_string(nodes.size()) + ")");
  }
  long long total = 0;
  for (int t : tasks_per_node) total += t;
  if (total > kMaxTasks) {
    return Status::invalid("partrain: " + std::to_string(total) + " tasks is more than the " +
                           std::to_string(kMaxTasks) + " partrain lays out; use fewer tasks");
  }
  std::set<std::string> seen;
  for (const std::string& n : nodes) {
    if (!seen.insert(n).second) {
      return Status::invalid("partrain: node '" + n +
                             "' appears twice in the node list; list each node once");
    }
  }
  if (gpus_per_node < 0 || nvlink_domain < 0) {
    return Status::invalid("partrain: GPUs per node and NVLink-domain size cannot be negative");
  }
  if (nvlink_domain > 0 && gpus_per_node > 0 && gpus_per_node % nvlink_domain != 0) {
    return Status::invalid("partrain: NVLink domain of " + std::to_string(nvlink_domain) +
                           " GPUs does not divide " + std::to_string(gpus_per_node) +
                           " GPUs per node; give a domain size that divides it");
  }
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (tasks_per_node[n] < 1) {
      return Status::invalid("partrain: node '" + nodes[n] + "' runs no task; give it one or "
                             "drop it from the node list");
    }
    if (gpus_per_node > 0 && tasks_per_node[n] > gpus_per_node) {
      return Status::invalid("partrain: node '" + nodes[n] + "' runs " +
                             std::to_string(tasks_per_node[n]) + " tasks but has " +
                             std::to_string(gpus_per_node) +
                             " GPUs; run one task per GPU (--ntasks-per-node=" +
                             std::to_string(gpus_per_node) + ")");
    }
    if (switches && !switches->leaf_of(nodes[n])) {
      return Status::invalid("partrain: node '" + nodes[n] +
                             "' is under no switch of the topology file; add it to a "
                             "'SwitchName=... Nodes=...' line");
    }
  }
  return Status::ok();
}

LinkClass SlurmView::link(int node_a, int node_b) const {
  if (node_a == node_b) return LinkClass::kIntraNode;
  if (!switches) return LinkClass::kInterNode;
  std::optional<int> a = switches->leaf_of(nodes[node_a]);
  std::optional<int> b = switches->leaf_of(nodes[node_b]);
  return a && b && *a == *b ? LinkClass::kInterNode : LinkClass::kInterSwitch;
}

std::vector<TaskSlot> slurm_task_order(const SlurmView& view) {
  std::vector<TaskSlot> order;
  order.reserve(static_cast<size_t>(view.world()));
  const int num_nodes = static_cast<int>(view.nodes.size());
  if (view.distribution == Distribution::kBlock) {
    for (int n = 0; n < num_nodes; ++n) {
      for (int l = 0; l < view.tasks_per_node[n]; ++l) order.push_back({n, l});
    }
    return order;
  }
  // Cyclic: one task per node per round, skipping nodes that are already full.
  std::vector<int> placed(static_cast<size_t>(num_nodes), 0);
  bool any = true;
  while (any) {
    any = false;
    for (int n = 0; n < num_nodes; ++n) {
      if (placed[n] < view.tasks_per_node[n]) {
        order.push_back({n, placed[n]++});
        any = true;
      }
    }
  }
  return order;
}

}  // namespace partrain
