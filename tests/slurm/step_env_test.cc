// The PARTRAIN_* environment of a task. Expected ranks come from the rank formula of
// DESIGN.md by hand, not from the code: with tp2,pp2 on 2 nodes x 4 GPUs, dp = 8/4 = 2,
// rank = tp + 2*dp + 4*pp, so pipeline stage 0 (ranks 0-3) fills node 0 and stage 1
// (ranks 4-7) fills node 1, TP pairs on neighbouring GPUs: rank = 4*node + local.
#include "step_env.h"

#include <map>

#include <gtest/gtest.h>

namespace partrain::spank {
namespace {

using Env = std::map<std::string, std::string>;

Env run(const std::string& spec, const StepFacts& f, PluginArgs args = {}) {
  Result<StepEnv> e = compute_step_env(spec, f, args, std::nullopt);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  if (!e.is_ok()) return {};
  return Env(e->vars.begin(), e->vars.end());
}

StepFacts two_by_four(int node, int local, const std::string& distribution) {
  StepFacts f;
  f.job_id = 1234;
  f.node_list = "n[1-2]";
  f.tasks_per_node = "4(x2)";
  f.node_index = node;
  f.local_task = local;
  f.distribution = distribution;
  f.gpus_on_node = "4";
  f.step_gpus = "0,1,2,3";
  f.visible_devices = "0,1,2,3";
  return f;
}

TEST(StepEnv, TwoNodesFourGpusTp2Pp2) {
  PluginArgs args;
  args.state_root = "/shared/pt";
  for (const char* dist : {"block", "cyclic"}) {
    for (int node = 0; node < 2; ++node) {
      for (int local = 0; local < 4; ++local) {
        Env e = run("tp2,pp2", two_by_four(node, local, dist), args);
        const int r = 4 * node + local;
        SCOPED_TRACE(std::string(dist) + " rank " + std::to_string(r));
        EXPECT_EQ(e["PARTRAIN_RANK"], std::to_string(r));
        EXPECT_EQ(e["PARTRAIN_WORLD"], "8");
        EXPECT_EQ(e["PARTRAIN_TP"], "2");
        EXPECT_EQ(e["PARTRAIN_PP"], "2");
        EXPECT_EQ(e["PARTRAIN_DP"], "2");
        EXPECT_EQ(e["PARTRAIN_EP"], "1");
        EXPECT_EQ(e["PARTRAIN_TP_RANK"], std::to_string(r % 2));
        EXPECT_EQ(e["PARTRAIN_DP_RANK"], std::to_string((r / 2) % 2));
        EXPECT_EQ(e["PARTRAIN_PP_RANK"], std::to_string(r / 4));
        EXPECT_EQ(e["PARTRAIN_EP_RANK"], "0");
        EXPECT_EQ(e["PARTRAIN_LOCAL_DEVICE"], std::to_string(local));
        EXPECT_EQ(e["PARTRAIN_NODE_RANKS"], node == 0 ? "0,1,2,3" : "4,5,6,7");
        EXPECT_EQ(e["PARTRAIN_COORDINATOR"], "n1:0");  // any free port, published by the coordinator
        EXPECT_EQ(e["PARTRAIN_STATE_DIR"], "/shared/pt/slurm-1234");
        EXPECT_EQ(e["PARTRAIN_SPEC"], "tp2,pp2");
      }
    }
  }
}

TEST(StepEnv, OneAgentPerNodeRunsTheNodesRanks) {
  StepFacts f = two_by_four(1, 0, "block");
  f.tasks_per_node = "1(x2)";
  Result<StepEnv> e = compute_step_env("tp4,pp2", f, PluginArgs{}, std::nullopt);
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  EXPECT_TRUE(e->agent);
  Env env(e->vars.begin(), e->vars.end());
  EXPECT_EQ(env["PARTRAIN_WORLD"], "8");
  EXPECT_EQ(env["PARTRAIN_NODE_RANKS"], "4,5,6,7");  // stage 1 on node 1
  EXPECT_EQ(env.count("PARTRAIN_RANK"), 0u);
  EXPECT_EQ(env.count("PARTRAIN_LOCAL_DEVICE"), 0u);
}

TEST(StepEnv, CpuRanksOneTaskPerNode) {
  StepFacts f;
  f.job_id = 7;
  f.node_list = "c[07-08]";
  f.tasks_per_node = "1(x2)";
  f.node_index = 1;
  PluginArgs fixed;
  fixed.port_base = 29500;  // a firewalled site's range: the first port tried
  Env e = run("dp2", f, fixed);
  EXPECT_EQ(e["PARTRAIN_RANK"], "1");
  EXPECT_EQ(e["PARTRAIN_WORLD"], "2");
  EXPECT_EQ(e["PARTRAIN_DP_RANK"], "1");
  EXPECT_EQ(e.count("PARTRAIN_LOCAL_DEVICE"), 0u);  // no GPU: a CPU rank
  EXPECT_EQ(e["PARTRAIN_COORDINATOR"], "c07:29507");  // 29500 + 7 % 1000
}

TEST(StepEnv, TaskBoundToOneGpuUsesDeviceZero) {
  StepFacts f = two_by_four(0, 3, "block");  // --gpus-per-task=1: the task sees GPU 3 only
  f.step_gpus = "3";
  f.visible_devices = "3";
  Env e = run("tp2,pp2", f);
  EXPECT_EQ(e["PARTRAIN_RANK"], "3");
  EXPECT_EQ(e["PARTRAIN_LOCAL_DEVICE"], "0");
}

TEST(StepEnv, TpGroupsThatMustSpanNodesAreAWarning) {
  // 3 CPU tasks per node, tp2: node 0 holds one pair (0,1) and a spare slot 2, node 1 the
  // same, so the third TP group is the two spare slots, one on each node.
  StepFacts f;
  f.node_list = "n[1-2]";
  f.tasks_per_node = "3(x2)";
  Result<StepEnv> e = compute_step_env("tp2", f, PluginArgs{}, std::nullopt);
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  ASSERT_EQ(e->warnings.size(), 1u);
  EXPECT_NE(e->warnings[0].find("span nodes"), std::string::npos);
}

TEST(StepEnv, LayoutsTheStepCannotHoldAreErrors) {
  StepFacts f = two_by_four(0, 0, "block");
  Result<StepEnv> e = compute_step_env("tp2,pp3", f, PluginArgs{}, std::nullopt);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("not a multiple"), std::string::npos);

  PluginArgs args;
  args.nvlink_domain = 2;
  e = compute_step_env("tp4", f, args, std::nullopt);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("NVLink"), std::string::npos) << e.status().message();

  e = compute_step_env("tpx", f, PluginArgs{}, std::nullopt);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("'tpx'"), std::string::npos);

  f.tasks_per_node = "4(x3)";  // three counts for two nodes
  e = compute_step_env("tp2", f, PluginArgs{}, std::nullopt);
  EXPECT_FALSE(e.is_ok());
}

TEST(StepEnv, SwitchTreeKeepsEachPipelineStageUnderOneLeaf) {
  // n1 and n3 share leaf s1, n2 and n4 leaf s2; 2 GPUs per node, tp2,pp2: a stage is two
  // TP groups = two nodes. Flat, stage 0 takes n1 n2; with the tree it takes n1 n3 (one
  // leaf), so n3's first GPU is rank 2 (tp0, dp1, pp0) instead of rank 4 (pp1).
  Result<SwitchTree> tree = SwitchTree::parse(
      "SwitchName=s1 Nodes=n[1,3]\nSwitchName=s2 Nodes=n[2,4]\nSwitchName=top Switches=s[1-2]\n",
      "topology.conf");
  ASSERT_TRUE(tree.is_ok()) << tree.status().message();
  StepFacts f;
  f.node_list = "n[1-4]";
  f.tasks_per_node = "2(x4)";
  f.gpus_on_node = "2";
  f.visible_devices = "0,1";
  f.node_index = 2;  // n3
  Result<StepEnv> flat = compute_step_env("tp2,pp2", f, PluginArgs{}, std::nullopt);
  Result<StepEnv> aware = compute_step_env("tp2,pp2", f, PluginArgs{}, *tree);
  ASSERT_TRUE(flat.is_ok() && aware.is_ok());
  Env flat_env(flat->vars.begin(), flat->vars.end());
  Env aware_env(aware->vars.begin(), aware->vars.end());
  EXPECT_EQ(flat_env["PARTRAIN_RANK"], "4");
  EXPECT_EQ(aware_env["PARTRAIN_RANK"], "2");
  EXPECT_EQ(aware_env["PARTRAIN_PP_RANK"], "0");
  EXPECT_EQ(aware_env["PARTRAIN_DP_RANK"], "1");
}

TEST(StepEnv, CountDevices) {
  EXPECT_EQ(count_devices(""), 0);
  EXPECT_EQ(count_devices("5"), 1);
  EXPECT_EQ(count_devices("0,1,2,3"), 4);
}

}  // namespace
}  // namespace partrain::spank
