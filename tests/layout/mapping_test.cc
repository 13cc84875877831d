// Task -> rank mapping: a hand-derived cyclic example, the 64-GPU case of the issue, and
// properties over many (nodes, GPUs, tp, pp, ep, distribution, switch tree) combinations:
// the mapping is a bijection onto Slurm's tasks, TP groups stay in one node / NVLink
// domain, DP groups stay under one leaf switch when a stage fits one.
#include "layout/mapping.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "layout/layout_spec.h"

namespace partrain {
namespace {

using testing::spec;

TEST(MappingTest, CyclicTwoNodesByHand) {
  // 2 nodes x 4 GPUs, cyclic: SLURM_PROCID 0..7 run on n1,n2,n1,n2,... with local ids
  // 0,0,1,1,2,2,3,3. tp2,pp2: stage 0 (ranks 0-3) belongs on n1, stage 1 on n2.
  SlurmView v = SlurmView::uniform(2, 4, Distribution::kCyclic);
  Layout l = *Layout::create(8, spec(2, 2));
  Result<Mapping> m = map_topology_aware(l, v);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->task_of_rank, (std::vector<int>{0, 2, 4, 6, 1, 3, 5, 7}));
  EXPECT_EQ(m->rank_of_task, (std::vector<int>{0, 4, 1, 5, 2, 6, 3, 7}));
  EXPECT_EQ(m->slot_of_rank[5], (TaskSlot{1, 1}));
  EXPECT_TRUE(m->tp_domain_local);
  // Slurm's order would pair rank 0 (n1) with rank 1 (n2) in a TP group.
  Result<Mapping> s = map_slurm_order(l, v);
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->task_of_rank, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_FALSE(s->tp_domain_local);
}

TEST(MappingTest, SixtyFourGpusTpStaysInNodesAndPpIsOutermost) {
  for (Distribution d : {Distribution::kBlock, Distribution::kCyclic}) {
    SlurmView v = SlurmView::uniform(8, 8, d);
    Layout l = *Layout::create(64, spec(4, 2));
    Mapping m = *map_topology_aware(l, v);
    EXPECT_TRUE(m.tp_domain_local);
    for (int r = 0; r < 64; ++r) {
      // Stage 0 on n1..n4, stage 1 on n5..n8: PP is the only axis between the halves.
      EXPECT_EQ(m.slot_of_rank[r].node / 4, l.coord(r).pp) << "rank " << r;
      EXPECT_EQ(m.slot_of_rank[r].node, r / 8);
    }
  }
}

TEST(MappingTest, NvlinkDomainsSmallerThanANode) {
  // 2 nodes x 8 GPUs in NVLink domains of 4, tp4, cyclic: every TP group in one domain.
  SlurmView v = SlurmView::uniform(2, 8, Distribution::kCyclic);
  v.nvlink_domain = 4;
  Layout l = *Layout::create(16, spec(4, 1));
  Mapping m = *map_topology_aware(l, v);
  EXPECT_TRUE(m.tp_domain_local);
  for (const std::vector<int>& g : l.groups(Axis::kTp)) {
    std::set<std::pair<int, int>> domains;
    for (int r : g) domains.insert({m.slot_of_rank[r].node, m.slot_of_rank[r].local / 4});
    EXPECT_EQ(domains.size(), 1u);
  }
}

TEST(MappingTest, UnevenTaskCountsStillMapEveryTask) {
  // 8+8+4 tasks on 8-GPU nodes, tp4,pp5: 2+2+1 whole chunks for 5 TP groups.
  SlurmView v;
  v.nodes = {"a", "b", "c"};
  v.tasks_per_node = {8, 8, 4};
  v.gpus_per_node = 8;
  v.distribution = Distribution::kCyclic;
  Layout l = *Layout::create(20, spec(4, 5));
  Mapping m = *map_topology_aware(l, v);
  EXPECT_TRUE(m.tp_domain_local);
  // 6+6+2 tasks, tp2,pp7: 3+3+1 chunks for 7 TP groups.
  v.tasks_per_node = {6, 6, 2};
  Layout l2 = *Layout::create(14, spec(2, 7));
  EXPECT_TRUE(map_topology_aware(l2, v)->tp_domain_local);
  // 6+6 tasks, tp4: 1+1 whole chunks for 3 TP groups, so one group must span both nodes;
  // the mapping still places every task and says TP is not all local.
  v.nodes = {"a", "b"};
  v.tasks_per_node = {6, 6};
  Layout l3 = *Layout::create(12, spec(4, 1));
  Mapping m3 = *map_topology_aware(l3, v);
  EXPECT_FALSE(m3.tp_domain_local);
  std::set<int> tasks(m3.task_of_rank.begin(), m3.task_of_rank.end());
  EXPECT_EQ(tasks.size(), 12u);
  int local_groups = 0;
  for (const std::vector<int>& g : l3.groups(Axis::kTp)) {
    bool one_node = true;
    for (int r : g) one_node = one_node && m3.slot_of_rank[r].node == m3.slot_of_rank[g[0]].node;
    local_groups += one_node;
  }
  EXPECT_EQ(local_groups, 2);
}

TEST(MappingTest, RefusesAWorldSizeMismatch) {
  SlurmView v = SlurmView::uniform(2, 4);
  Layout l = *Layout::create(16, spec(4, 2));
  EXPECT_EQ(map_topology_aware(l, v).status().message(),
            "partrain: the layout has 16 ranks but Slurm runs 8 tasks; run one task per rank");
}

SwitchTree tree_from(const std::string& text) {
  Result<SwitchTree> t = SwitchTree::parse(text, "test.conf");
  EXPECT_TRUE(t.is_ok()) << t.status().message();
  return std::move(t).value();
}

TEST(MappingTest, DataParallelGroupsStayUnderOneLeafSwitch) {
  // Leaves interleave with the node list (odd nodes on s1, even on s2), as happens when
  // Slurm sorts names but the racks are cabled otherwise. tp4,pp2 on 8x4: a stage is
  // 4 nodes = one leaf.
  SlurmView v = SlurmView::uniform(8, 4);
  v.switches = tree_from(
      "SwitchName=s1 Nodes=n[1,3,5,7]\nSwitchName=s2 Nodes=n[2,4,6,8]\n"
      "SwitchName=top Switches=s[1-2]\n");
  Layout l = *Layout::create(32, spec(4, 2));
  Mapping m = *map_topology_aware(l, v);
  for (const std::vector<int>& g : l.groups(Axis::kDp)) {
    std::set<LinkClass> links;
    for (int r : g) links.insert(v.link(m.slot_of_rank[g.front()].node, m.slot_of_rank[r].node));
    EXPECT_EQ(links.count(LinkClass::kInterSwitch), 0u);
  }
  // And PP crosses: every PP pair spans the two leaves.
  for (const std::vector<int>& g : l.groups(Axis::kPp)) {
    EXPECT_EQ(v.link(m.slot_of_rank[g[0]].node, m.slot_of_rank[g[1]].node),
              LinkClass::kInterSwitch);
  }
}

TEST(MappingTest, StagesAvoidStraddlingLeaves) {
  // Leaves of 1, 2 and 1 nodes, 2 GPUs each; tp2,pp2 makes a stage of 2 nodes. Slurm's
  // order puts stage 0 on n1 (s1) + n2 (s2) and stage 1 on n3 (s2) + n4 (s3): both
  // straddle. The aware mapping puts stage 0 wholly on s2 (n2, n3); only stage 1 straddles.
  SlurmView v = SlurmView::uniform(4, 2);
  v.switches = tree_from("SwitchName=s1 Nodes=n1\nSwitchName=s2 Nodes=n[2-3]\n"
                         "SwitchName=s3 Nodes=n4\nSwitchName=top Switches=s[1-3]\n");
  Layout l = *Layout::create(8, spec(2, 2));
  Mapping m = *map_topology_aware(l, v);
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(m.slot_of_rank[r].node == 1 || m.slot_of_rank[r].node == 2) << "rank " << r;
  }
  EXPECT_TRUE(m.tp_domain_local);
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

// Every property over a grid of cases. Returns how many cases ran.
int check_properties(bool with_tree) {
  int cases = 0;
  for (int nodes : {1, 2, 3, 4, 6, 8}) {
    for (int gpus : {1, 2, 4, 8}) {
      const int world = nodes * gpus;
      for (int tp : {1, 2, 4, 8}) {
        for (int pp : {1, 2, 3, 4}) {
          for (int ep : {1, 2}) {
            if (tp > gpus || gpus % tp != 0 || world % (tp * pp) != 0) continue;
            if ((world / (tp * pp)) % ep != 0) continue;
            for (Distribution d : {Distribution::kBlock, Distribution::kCyclic}) {
              SlurmView v = SlurmView::uniform(nodes, gpus, d);
              if (with_tree) {
                // Two leaves, interleaved with the node list.
                std::vector<std::string> odd, even;
                for (int n = 1; n <= nodes; ++n) {
                  (n % 2 ? odd : even).push_back("n" + std::to_string(n));
                }
                std::string text = "SwitchName=s1 Nodes=" + join(odd) + "\n";
                if (!even.empty()) text += "SwitchName=s2 Nodes=" + join(even) + "\n";
                v.switches = tree_from(text);
              }
              Layout l = *Layout::create(world, spec(tp, pp, ep));
              SCOPED_TRACE(l.spec().to_string() + " nodes=" + std::to_string(nodes) +
                           " gpus=" + std::to_string(gpus) + " " +
                           std::string(distribution_name(d)));
              Result<Mapping> m = map_topology_aware(l, v);
              EXPECT_TRUE(m.is_ok()) << m.status().message();
              if (!m.is_ok()) continue;
              ++cases;
              // Bijection between ranks and Slurm tasks, consistent with Slurm's placement.
              std::vector<TaskSlot> tasks = slurm_task_order(v);
              std::vector<int> hits(static_cast<size_t>(world), 0);
              for (int r = 0; r < world; ++r) {
                const int p = m->task_of_rank[r];
                EXPECT_GE(p, 0);
                EXPECT_LT(p, world);
                if (p < 0 || p >= world) continue;
                ++hits[p];
                EXPECT_EQ(m->rank_of_task[p], r);
                EXPECT_EQ(m->slot_of_rank[r], tasks[p]);
              }
              for (int h : hits) EXPECT_EQ(h, 1);
              // TP node-local (tp divides the GPUs per node here).
              EXPECT_TRUE(m->tp_domain_local);
              for (const std::vector<int>& g : l.groups(Axis::kTp)) {
                for (int r : g) EXPECT_EQ(m->slot_of_rank[r].node, m->slot_of_rank[g[0]].node);
              }
              // When whole stages pack the leaves exactly, DP groups stay inside a leaf.
              if (with_tree) {
                const int stage = world / pp;
                const int leaf_a = ((nodes + 1) / 2) * gpus;
                const int leaf_b = (nodes / 2) * gpus;
                if (leaf_a % stage == 0 && leaf_b % stage == 0) {
                  for (const std::vector<int>& g : l.groups(Axis::kDp)) {
                    for (int r : g) {
                      EXPECT_NE(v.link(m->slot_of_rank[g[0]].node, m->slot_of_rank[r].node),
                                LinkClass::kInterSwitch);
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return cases;
}

TEST(MappingTest, PropertiesWithoutSwitchTree) { EXPECT_GT(check_properties(false), 200); }
TEST(MappingTest, PropertiesWithInterleavedLeaves) { EXPECT_GT(check_properties(true), 200); }

}  // namespace
}  // namespace partrain
