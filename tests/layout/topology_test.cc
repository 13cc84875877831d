// Slurm's compressed lists, topology.conf (valid trees and every parse error, with file and
// line), the Slurm view's checks and Slurm's own task order for block and cyclic.
#include "layout/topology.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "layout/hostlist.h"

namespace partrain {
namespace {

using Names = std::vector<std::string>;

TEST(HostlistTest, ExpandsSlurmHostLists) {
  EXPECT_EQ(*expand_hostlist("n[1-4,7],gpu[01-02]"),
            (Names{"n1", "n2", "n3", "n4", "n7", "gpu01", "gpu02"}));
  EXPECT_EQ(*expand_hostlist("node1"), (Names{"node1"}));
  EXPECT_EQ(*expand_hostlist("a,b,c"), (Names{"a", "b", "c"}));
  EXPECT_EQ(*expand_hostlist("n[8-11]"), (Names{"n8", "n9", "n10", "n11"}));
  EXPECT_EQ(*expand_hostlist("n[098-101]"), (Names{"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(*expand_hostlist("r[1-2]n[1-2]"), (Names{"r1n1", "r1n2", "r2n1", "r2n2"}));
  EXPECT_EQ(*expand_hostlist("s[1-2]-ib"), (Names{"s1-ib", "s2-ib"}));
}

TEST(HostlistTest, RefusesMalformedListsWithTheFix) {
  const std::pair<const char*, const char*> cases[] = {
      {"n[1-4", "partrain: node list 'n[1-4': missing ']'; write e.g. n[1-4,7]"},
      {"n1-4]", "partrain: node list 'n1-4]': ']' without '['; write e.g. n[1-4,7]"},
      {"n[4-1]", "partrain: node list 'n[4-1]': range '4-1' counts down; write the lower "
                 "bound first"},
      {"n[a-b]", "partrain: node list 'n[a-b]': 'a-b' is not a number or range; write e.g. "
                 "n[1-4,7]"},
      {"n[1,,2]", "partrain: node list 'n[1,,2]': '' is not a number or range; write e.g. "
                  "n[1-4,7]"},
      {"n1,,n2", "partrain: node list 'n1,,n2': empty host name; remove the extra comma"},
      {"", "partrain: node list '': empty; give at least one host name"},
      {"n1 n2", "partrain: node list 'n1 n2': contains a space; separate names with commas "
                "only"},
      {"n[1-[2]]", "partrain: node list 'n[1-[2]]': nested '['; write e.g. n[1-4,7]"},
      {"n[1-99999999]", "partrain: node list 'n[1-99999999]': range '1-99999999' is too large"},
  };
  for (const auto& [text, message] : cases) {
    SCOPED_TRACE(text);
    auto r = expand_hostlist(text);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().message(), message);
  }
}

TEST(HostlistTest, ExpandsTaskCounts) {
  EXPECT_EQ(*expand_task_counts("4(x2),2"), (std::vector<int>{4, 4, 2}));
  EXPECT_EQ(*expand_task_counts("8"), (std::vector<int>{8}));
  EXPECT_EQ(*expand_task_counts("1,2(x3)"), (std::vector<int>{1, 2, 2, 2}));
  EXPECT_EQ(expand_task_counts("4(2)").status().message(),
            "partrain: tasks per node '4(2)': '4(2)' is not a positive count or "
            "COUNT(xREPEAT); write e.g. 4(x2),2");
  EXPECT_EQ(expand_task_counts("0").status().message(),
            "partrain: tasks per node '0': '0' is not a positive count or COUNT(xREPEAT); "
            "write e.g. 4(x2),2");
  EXPECT_FALSE(expand_task_counts("4(x0)").is_ok());
  EXPECT_FALSE(expand_task_counts("4,").is_ok());
}

TEST(SwitchTreeTest, ParsesATwoLevelTree) {
  const char* text =
      "# two leaves under one spine\n"
      "SwitchName=s1 Nodes=n[1-4]\n"
      "\n"
      "switchname=s2 nodes=n[5-8] LinkSpeed=100   # keys are case-insensitive\n"
      "SwitchName=top Switches=s[1-2]\n";
  Result<SwitchTree> t = SwitchTree::parse(text, "topo.conf");
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  ASSERT_EQ(t->switches().size(), 3u);
  EXPECT_EQ(t->switches()[0].line, 2);
  EXPECT_EQ(t->switches()[1].nodes, (Names{"n5", "n6", "n7", "n8"}));
  EXPECT_EQ(t->switches()[2].children, (Names{"s1", "s2"}));
  EXPECT_EQ(t->leaf_of("n3"), 0);
  EXPECT_EQ(t->leaf_of("n5"), 1);
  EXPECT_FALSE(t->leaf_of("n9").has_value());
  EXPECT_EQ(t->leaf_rank(), (std::vector<int>{0, 1, -1}));
}

TEST(SwitchTreeTest, LeafOrderFollowsTheTreeNotTheFile) {
  // The spine lists s2 before s1, and another spine comes first in the file.
  const char* text =
      "SwitchName=s1 Nodes=a[1-2]\n"
      "SwitchName=s2 Nodes=b[1-2]\n"
      "SwitchName=s3 Nodes=c[1-2]\n"
      "SwitchName=spine2 Switches=s3\n"
      "SwitchName=spine1 Switches=s2,s1\n"
      "SwitchName=top Switches=spine1,spine2\n";
  Result<SwitchTree> t = SwitchTree::parse(text, "t.conf");
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  // Depth-first from top: spine1 -> s2, s1; spine2 -> s3.
  EXPECT_EQ(t->leaf_rank(), (std::vector<int>{1, 0, 2, -1, -1, -1}));
}

TEST(SwitchTreeTest, ParseErrorsNameFileLineAndFix) {
  const std::pair<const char*, const char*> cases[] = {
      {"SwitchName=s1 Nodes=n[1-2]\nSwitchName=s1 Nodes=n3\n",
       "partrain: t.conf:2: switch 's1' is already defined on line 1; give each switch one "
       "line"},
      {"SwitchName=s1 Nodes=n[1-2]\nSwitchName=s2 Nodes=n[2-3]\n",
       "partrain: t.conf:2: node 'n2' is already under switch 's1' (line 1); a node hangs off "
       "one leaf switch"},
      // Found by fuzz_topology: the same node twice on one line read past the switch table.
      {"SwitchName=s1 Nodes=a1\nSwitchName=s2 Nodes=b[2,2]\n",
       "partrain: t.conf:2: node 'b2' is listed twice in Nodes=; list it once"},
      {"SwitchName=s1 Nodes=n1\nSwitchName=top Switches=s[1-2]\n",
       "partrain: t.conf:2: switch 'top' lists unknown switch 's2'; define it with "
       "SwitchName=s2"},
      {"SwitchName=s1 Nodes=n1 Speed=4\n",
       "partrain: t.conf:1: unknown key 'Speed'; a switch line has SwitchName=, Nodes=, "
       "Switches= and LinkSpeed="},
      {"\nNodes=n1 SwitchName=s1\n",
       "partrain: t.conf:2: expected 'SwitchName=NAME' first, got 'Nodes=n1'; partrain reads "
       "the topology/tree form (SwitchName=s1 Nodes=n[1-4])"},
      {"SwitchName=s1\n", "partrain: t.conf:1: switch 's1' has neither Nodes= nor Switches=; "
                          "add one"},
      {"SwitchName=s1 Nodes=\n",
       "partrain: t.conf:1: 'Nodes=' needs a value; write KEY=VALUE, e.g. SwitchName=s1"},
      {"SwitchName=s1 Nodes=n[1-2\n",
       "partrain: t.conf:1: Nodes= 'n[1-2': missing ']'; write e.g. n[1-4,7]"},
      {"SwitchName=s1 Nodes=n1 Nodes=n2\n",
       "partrain: t.conf:1: 'Nodes=' is given twice; list all names in one"},
      {"SwitchName=a Nodes=n1 Switches=b\nSwitchName=b Switches=a\n",
       "partrain: t.conf:1: switch 'a' is part of a cycle of Switches=; the switches must "
       "form a tree"},
      {"SwitchName=l1 Nodes=n1\nSwitchName=x Switches=l1\nSwitchName=y Switches=l1\n",
       "partrain: t.conf:3: switch 'l1' already has a parent (line 2); a switch has one "
       "parent"},
      {"# only a comment\n", "partrain: t.conf: no switches; add lines like 'SwitchName=s1 "
                             "Nodes=n[1-4]'"},
  };
  for (const auto& [text, message] : cases) {
    SCOPED_TRACE(text);
    Result<SwitchTree> t = SwitchTree::parse(text, "t.conf");
    ASSERT_FALSE(t.is_ok());
    EXPECT_EQ(t.status().message(), message);
  }
}

TEST(SwitchTreeTest, LoadsAFileAndNamesAMissingOne) {
  std::string path = ::testing::TempDir() + "partrain_topology_test.conf";
  {
    std::ofstream out(path);
    out << "SwitchName=s1 Nodes=n[1-2]\nSwitchName=s2 Nodes=n[3-4] Bogus=1\n";
  }
  EXPECT_EQ(SwitchTree::load(path).status().message(),
            "partrain: " + path + ":2: unknown key 'Bogus'; a switch line has SwitchName=, "
            "Nodes=, Switches= and LinkSpeed=");
  std::remove(path.c_str());
  Result<SwitchTree> missing = SwitchTree::load(path);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "partrain: cannot read topology file '" + path +
                                            "'; check the path given to --topology");
}

TEST(SlurmViewTest, BlockAndCyclicTaskOrder) {
  SlurmView v;
  v.nodes = {"a", "b", "c"};
  v.tasks_per_node = {2, 3, 1};
  v.gpus_per_node = 4;
  using S = TaskSlot;
  // Block: node after node.
  EXPECT_EQ(slurm_task_order(v),
            (std::vector<S>{{0, 0}, {0, 1}, {1, 0}, {1, 1}, {1, 2}, {2, 0}}));
  // Cyclic: one per node per round; c is full after round 1, a after round 2.
  v.distribution = Distribution::kCyclic;
  EXPECT_EQ(slurm_task_order(v),
            (std::vector<S>{{0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1}, {1, 2}}));
}

TEST(SlurmViewTest, ChecksAndLinkClasses) {
  SlurmView v = SlurmView::uniform(4, 8);
  EXPECT_EQ(v.nodes, (Names{"n1", "n2", "n3", "n4"}));
  EXPECT_EQ(v.world(), 32);
  EXPECT_TRUE(v.check().is_ok());
  EXPECT_EQ(v.link(1, 1), LinkClass::kIntraNode);
  EXPECT_EQ(v.link(0, 3), LinkClass::kInterNode);
  v.switches = *SwitchTree::parse("SwitchName=s1 Nodes=n[1-2]\nSwitchName=s2 Nodes=n[3-4]\n",
                                  "t.conf");
  EXPECT_EQ(v.link(0, 1), LinkClass::kInterNode);
  EXPECT_EQ(v.link(1, 2), LinkClass::kInterSwitch);

  SlurmView bad = v;
  bad.nodes[3] = "n5";
  EXPECT_EQ(bad.check().message(), "partrain: node 'n5' is under no switch of the topology "
                                   "file; add it to a 'SwitchName=... Nodes=...' line");
  bad = SlurmView::uniform(2, 4);
  bad.tasks_per_node[1] = 5;
  EXPECT_EQ(bad.check().message(), "partrain: node 'n2' runs 5 tasks but has 4 GPUs; run one "
                                   "task per GPU (--ntasks-per-node=4)");
  bad = SlurmView::uniform(2, 4);
  bad.nodes[1] = "n1";
  EXPECT_EQ(bad.check().message(),
            "partrain: node 'n1' appears twice in the node list; list each node once");
  bad = SlurmView::uniform(2, 8);
  bad.nvlink_domain = 3;
  EXPECT_EQ(bad.check().message(), "partrain: NVLink domain of 3 GPUs does not divide 8 GPUs "
                                   "per node; give a domain size that divides it");
  bad = SlurmView::uniform(3, 4);
  bad.tasks_per_node.pop_back();
  EXPECT_EQ(bad.check().message(), "partrain: 2 task counts for 3 nodes; give one count per "
                                   "node, e.g. 4(x3)");
}

TEST(SlurmViewTest, ParsesDistribution) {
  EXPECT_EQ(*parse_distribution("block"), Distribution::kBlock);
  EXPECT_EQ(*parse_distribution("cyclic"), Distribution::kCyclic);
  EXPECT_EQ(*parse_distribution("cyclic:block"), Distribution::kCyclic);
  EXPECT_EQ(parse_distribution("plane=4").status().message(),
            "partrain: task distribution 'plane=4' is not supported; use block or cyclic");
}

}  // namespace
}  // namespace partrain
