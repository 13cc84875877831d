// Which Slurm task becomes which partrain rank.
//
// Slurm fixes where each task runs (SLURM_PROCID -> node, SLURM_LOCALID); partrain is free
// to choose which rank each task plays. Taking rank = SLURM_PROCID ("Slurm order") puts
// consecutive ranks on different nodes under --distribution=cyclic, which splits every
// tensor-parallel group across the network. The topology-aware mapping instead places
// the layout's groups on the hardware, heaviest traffic on the fastest links:
//
//   1. Chunks. Each NVLink domain (normally a node) is cut into chunks of tp consecutive
//      local devices; one TP group fills one chunk, so TP never leaves a domain.
//   2. Leaves. Nodes are grouped by leaf switch, leaves in depth-first order of the
//      switch tree (siblings adjacent), nodes in node-list order inside a leaf; without a
//      tree all nodes form one leaf.
//   3. Stages. The rank order puts pp outermost, so pipeline stage s is the contiguous
//      rank block [s*W/pp, (s+1)*W/pp): W/(pp*tp) TP groups holding every DP, EP and CP
//      group of that stage. Stages are placed one after the other: on the current leaf
//      while it has room for the whole stage; else on the leaf that fits the whole stage
//      most tightly (best fit, ties to the earlier leaf); else, when no leaf holds a whole
//      stage, on chunks in leaf order starting at the current leaf. So DP/EP groups stay
//      inside one leaf switch whenever a stage fits one, and PP - the smallest traffic,
//      point to point - is the axis that crosses switches.
//   4. Inside a stage, TP group k (k = (rank mod W/pp) / tp, i.e. cp, then ep, then dp
//      order) takes the stage's k-th chunk, so consecutive ring members sit side by side.
//   5. Leftovers. If uneven task counts leave too few whole chunks, the remaining TP groups
//      take the remaining single slots in leaf order (those groups then span nodes).
//   6. Candidates. No single placement order is cheapest for every model: best fit can
//      trade one pipeline hop for another (leaves of 3 nodes, stages of 2: some stage
//      must straddle, and which one matters), and under cyclic distribution Slurm's own
//      order spreads each stage over all nodes so that every PP pair shares a node -
//      cheaper when gradients are small and activations large. So step 3 runs four ways:
//      best fit in leaf order, plain fill in leaf order, plain fill in node-list order,
//      and plain fill in Slurm's task order (chunks ordered by their first task's
//      SLURM_PROCID: Slurm's order with TP repaired). The cost model (cost_model.h) rates
//      each for the step sizes given; the cheapest in link time (bytes over each link
//      class's speed) wins, ties to the earlier candidate. All keep TP inside domains.
//
// Part of the layout core: standard library only.
#pragma once

#include <vector>

#include "common/status.h"
#include "layout/layout.h"
#include "layout/topology.h"

namespace partrain {

struct Mapping {
  std::vector<TaskSlot> slot_of_rank;  // where rank r runs
  std::vector<int> task_of_rank;       // the SLURM_PROCID that plays rank r
  std::vector<int> rank_of_task;       // the rank SLURM_PROCID p plays
  // True when every TP group lies inside one NVLink domain.
  bool tp_domain_local = true;
};

// rank = SLURM_PROCID. Errors when the view is inconsistent or its world size differs
// from the layout's.
Result<Mapping> map_slurm_order(const Layout& layout, const SlurmView& view);

struct StepSizes;

// The topology-aware mapping described above, candidates compared for a step of `sizes`
// (StepSizes' defaults in the first form). Same errors as map_slurm_order.
Result<Mapping> map_topology_aware(const Layout& layout, const SlurmView& view);
Result<Mapping> map_topology_aware(const Layout& layout, const SlurmView& view,
                                   const StepSizes& sizes);

// True when every TP group of `m` lies inside one NVLink domain of `view`.
bool tp_groups_domain_local(const Layout& layout, const SlurmView& view, const Mapping& m);

}  // namespace partrain
