// Task -> rank mappings: Slurm's order and the topology-aware one (see mapping.h).
#include "layout/mapping.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>

#include "layout/cost_model.h"

namespace partrain {
namespace {

// tp consecutive local devices on one node: the home of one TP group.
struct Chunk {
  int node = 0;
  int first_local = 0;
};

struct Leaf {
  std::vector<Chunk> chunks;
  size_t next = 0;  // first chunk not yet taken
  size_t free() const { return chunks.size() - next; }
};

Status check_sizes(const Layout& layout, const SlurmView& view) {
  PARTRAIN_RETURN_IF_ERROR(view.check());
  if (view.world() != layout.world()) {
    return Status::invalid("partrain: the layout has " + std::to_string(layout.world()) +
                           " ranks but Slurm runs " + std::to_string(view.world()) +
                           " tasks; run one task per rank");
  }
  return Status::ok();
}

Mapping finish(const SlurmView& view, const Layout& layout, std::vector<TaskSlot> slot_of_rank) {
  std::vector<TaskSlot> tasks = slurm_task_order(view);
  std::map<std::pair<int, int>, int> task_at;  // (node, local) -> SLURM_PROCID
  for (size_t p = 0; p < tasks.size(); ++p) {
    task_at[{tasks[p].node, tasks[p].local}] = static_cast<int>(p);
  }
  Mapping m;
  m.slot_of_rank = std::move(slot_of_rank);
  m.task_of_rank.resize(m.slot_of_rank.size());
  m.rank_of_task.resize(m.slot_of_rank.size());
  for (size_t r = 0; r < m.slot_of_rank.size(); ++r) {
    int p = task_at.at({m.slot_of_rank[r].node, m.slot_of_rank[r].local});
    m.task_of_rank[r] = p;
    m.rank_of_task[static_cast<size_t>(p)] = static_cast<int>(r);
  }
  m.tp_domain_local = tp_groups_domain_local(layout, view, m);
  return m;
}

// Nodes grouped by leaf switch (depth-first leaf order), node-list order inside a leaf.
std::vector<std::vector<int>> nodes_by_leaf(const SlurmView& view) {
  const int num_nodes = static_cast<int>(view.nodes.size());
  if (!view.switches) {
    std::vector<int> all(static_cast<size_t>(num_nodes));
    for (int n = 0; n < num_nodes; ++n) all[n] = n;
    return {all};
  }
  std::map<int, std::vector<int>> by_rank;  // leaf's depth-first position -> nodes
  for (int n = 0; n < num_nodes; ++n) {
    int leaf = *view.switches->leaf_of(view.nodes[n]);  // check() made sure it exists
    by_rank[view.switches->leaf_rank()[leaf]].push_back(n);
  }
  std::vector<std::vector<int>> out;
  for (auto& [rank, nodes] : by_rank) out.push_back(std::move(nodes));
  return out;
}

// Cuts one node's tasks into chunks of tp consecutive devices inside an NVLink domain
// (inside the node when tp exceeds the domain); devices left over go to `spare`.
void cut_node(const SlurmView& view, int node, int tp, std::vector<Chunk>* chunks,
              std::vector<TaskSlot>* spare) {
  const int tasks = view.tasks_per_node[node];
  const int domain = tp <= view.domain_size(node) ? view.domain_size(node) : tasks;
  for (int start = 0; start < tasks; start += domain) {
    const int end = std::min(start + domain, tasks);
    int local = start;
    for (; local + tp <= end; local += tp) chunks->push_back({node, local});
    for (; local < end; ++local) spare->push_back({node, local});
  }
}


enum class Placement { kBestFitLeaves, kFillLeaves, kFillNodeList, kFillTaskOrder };

// Steps 1-5 of mapping.h for one way of placing stages; returns where each rank runs.
std::vector<TaskSlot> place(const Layout& layout, const SlurmView& view, Placement how) {
  const int tp = layout.tp();
  const int stage_ranks = layout.world() / layout.pp();
  const size_t groups_per_stage = static_cast<size_t>(stage_ranks / tp);

  // 1 + 2: chunks per leaf, in leaf order; spare single devices in the same order.
  std::vector<std::vector<int>> node_groups;
  if (how == Placement::kBestFitLeaves || how == Placement::kFillLeaves) {
    node_groups = nodes_by_leaf(view);
  } else {
    SlurmView flat = view;
    flat.switches.reset();
    node_groups = nodes_by_leaf(flat);
  }
  std::vector<Leaf> leaves;
  std::vector<TaskSlot> spare;
  for (const std::vector<int>& nodes : node_groups) {
    Leaf leaf;
    for (int n : nodes) cut_node(view, n, tp, &leaf.chunks, &spare);
    leaves.push_back(std::move(leaf));
  }
  if (how == Placement::kFillTaskOrder) {
    // Chunks in the order Slurm started their first task: Slurm's own order, TP repaired.
    std::map<std::pair<int, int>, int> task_at;
    std::vector<TaskSlot> tasks = slurm_task_order(view);
    for (size_t p = 0; p < tasks.size(); ++p) {
      task_at[{tasks[p].node, tasks[p].local}] = static_cast<int>(p);
    }
    auto first_task = [&](const Chunk& c) { return task_at.at({c.node, c.first_local}); };
    std::stable_sort(leaves[0].chunks.begin(), leaves[0].chunks.end(),
                     [&](const Chunk& a, const Chunk& b) { return first_task(a) < first_task(b); });
    std::stable_sort(spare.begin(), spare.end(), [&](const TaskSlot& a, const TaskSlot& b) {
      return task_at.at({a.node, a.local}) < task_at.at({b.node, b.local});
    });
  }

  // 3: place stage after stage. Chunks taken for stage s, in order.
  std::vector<std::vector<Chunk>> stage_chunks(static_cast<size_t>(layout.pp()));
  size_t cur = 0;
  for (auto& placed : stage_chunks) {
    auto take = [&](size_t leaf, size_t count) {
      Leaf& l = leaves[leaf];
      for (size_t i = 0; i < count && l.next < l.chunks.size(); ++i) {
        placed.push_back(l.chunks[l.next++]);
      }
    };
    if (how == Placement::kBestFitLeaves && leaves[cur].free() < groups_per_stage) {
      std::optional<size_t> best;
      for (size_t l = 0; l < leaves.size(); ++l) {
        if (leaves[l].free() >= groups_per_stage &&
            (!best || leaves[l].free() < leaves[*best].free())) {
          best = l;
        }
      }
      if (best) cur = *best;
    }
    // Fill from the current leaf on (wrapping); best fit has made it one that holds the
    // whole stage where any leaf does.
    for (size_t step = 0; step < leaves.size() && placed.size() < groups_per_stage; ++step) {
      size_t l = (cur + step) % leaves.size();
      if (leaves[l].free() == 0) continue;
      take(l, groups_per_stage - placed.size());
      cur = l;
    }
  }
  // Chunks nobody took become spare devices too, after the ones already spare.
  for (Leaf& l : leaves) {
    for (size_t i = l.next; i < l.chunks.size(); ++i) {
      for (int d = 0; d < tp; ++d) spare.push_back({l.chunks[i].node, l.chunks[i].first_local + d});
    }
  }

  // 4 + 5: rank r of stage s, TP group k, TP index i -> chunk k of stage s, device i;
  // TP groups without a chunk take spare devices in order.
  std::vector<TaskSlot> slot_of_rank(static_cast<size_t>(layout.world()));
  size_t next_spare = 0;
  for (int r = 0; r < layout.world(); ++r) {
    const size_t stage = static_cast<size_t>(r / stage_ranks);
    const size_t k = static_cast<size_t>((r % stage_ranks) / tp);
    const int i = r % tp;
    if (k < stage_chunks[stage].size()) {
      slot_of_rank[r] = {stage_chunks[stage][k].node, stage_chunks[stage][k].first_local + i};
    } else {
      slot_of_rank[r] = spare[next_spare++];
    }
  }
  return slot_of_rank;
}

}  // namespace

bool tp_groups_domain_local(const Layout& layout, const SlurmView& view, const Mapping& m) {
  for (const std::vector<int>& group : layout.groups(Axis::kTp)) {
    const TaskSlot first = m.slot_of_rank[group.front()];
    const int domain = view.domain_size(first.node);
    for (int r : group) {
      const TaskSlot s = m.slot_of_rank[r];
      if (s.node != first.node || s.local / domain != first.local / domain) return false;
    }
  }
  return true;
}

Result<Mapping> map_slurm_order(const Layout& layout, const SlurmView& view) {
  PARTRAIN_RETURN_IF_ERROR(check_sizes(layout, view));
  return finish(view, layout, slurm_task_order(view));
}

Result<Mapping> map_topology_aware(const Layout& layout, const SlurmView& view) {
  return map_topology_aware(layout, view, StepSizes{});
}

Result<Mapping> map_topology_aware(const Layout& layout, const SlurmView& view,
                                   const StepSizes& sizes) {
  PARTRAIN_RETURN_IF_ERROR(check_sizes(layout, view));
  std::optional<Mapping> best;
  double best_seconds = 0;
  for (Placement how : {Placement::kBestFitLeaves, Placement::kFillLeaves,
                        Placement::kFillNodeList, Placement::kFillTaskOrder}) {
    // Without a switch tree the first three coincide; under block distribution Slurm's
    // task order is the node-list order, so the last one repeats the third.
    const bool repeat =
        ((how == Placement::kFillLeaves || how == Placement::kFillNodeList) && !view.switches) ||
        (how == Placement::kFillTaskOrder && view.distribution == Distribution::kBlock);
    if (repeat) continue;
    Mapping m = finish(view, layout, place(layout, view, how));
    const double seconds = link_seconds(step_cost(layout, view, m, sizes).total);
    if (!best || seconds < best_seconds * (1 - 1e-9)) {
      best = std::move(m);
      best_seconds = seconds;
    }
  }
  return std::move(*best);
}

}  // namespace partrain
