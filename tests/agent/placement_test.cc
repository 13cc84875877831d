// Where an agent stands, from --standalone or from the SPANK plugin's environment; bad
// environments are configuration errors naming the variable.
#include <gtest/gtest.h>

#include "agent/agent.h"

namespace partrain::agent {
namespace {

using Env = std::vector<std::pair<std::string, std::string>>;

TEST(Placement, StandaloneRunsEveryRankLocally) {
  AgentOptions o;
  o.standalone = true;
  o.nproc = 3;
  Result<Placement> p = placement_from(o, {});
  ASSERT_TRUE(p) << p.status().message();
  EXPECT_EQ(p->world, 3);
  EXPECT_EQ(p->node_ranks, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(p->coordinator_host, "127.0.0.1");
  EXPECT_EQ(p->coordinator_port, 0);
  EXPECT_EQ(p->node, 0);
  EXPECT_EQ(p->num_nodes, 1);
}

TEST(Placement, SlurmAgentReadsTheSpankEnvironment) {
  AgentOptions o;
  const Env env = {{"PARTRAIN_WORLD", "8"},        {"PARTRAIN_NODE_RANKS", "4,5,6,7"},
                   {"PARTRAIN_COORDINATOR", "n1:29400"}, {"PARTRAIN_JOB_SECRET_FILE", "/s/secret"},
                   {"SLURM_NODEID", "1"},          {"SLURM_NNODES", "2"},
                   {"SLURMD_NODENAME", "n2"}};
  Result<Placement> p = placement_from(o, env);
  ASSERT_TRUE(p) << p.status().message();
  EXPECT_EQ(p->world, 8);
  EXPECT_EQ(p->node_ranks, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(p->coordinator_host, "n1");
  EXPECT_EQ(p->coordinator_port, 29400);
  EXPECT_EQ(p->secret_file, "/s/secret");
  EXPECT_EQ(p->node, 1);
  EXPECT_EQ(p->num_nodes, 2);
  EXPECT_EQ(p->node_name, "n2");
}

TEST(Placement, BadEnvironmentsNameTheVariable) {
  AgentOptions o;
  Result<Placement> missing = placement_from(o, {{"PARTRAIN_WORLD", "2"}});
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("PARTRAIN_NODE_RANKS is not set"), std::string::npos);

  // The plugin refused the step's layout: its reason, not the first variable missing.
  Result<Placement> refused = placement_from(
      o, {{"PARTRAIN_SPANK_ERROR", "step 7.0: world size 2 is not a multiple of tp3 x pp1 = 3"}});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.status().message(), "the partrain SPANK plugin gave this task no ranks: step 7.0: world size 2 "
                                        "is not a multiple of tp3 x pp1 = 3");

  Result<Placement> rank = placement_from(
      o, {{"PARTRAIN_WORLD", "2"}, {"PARTRAIN_NODE_RANKS", "0,2"}, {"PARTRAIN_COORDINATOR", "h:1"}});
  ASSERT_FALSE(rank);
  EXPECT_EQ(rank.status().message(), "PARTRAIN_NODE_RANKS=0,2: rank 2 is not below PARTRAIN_WORLD=2");

  Result<Placement> port = placement_from(
      o, {{"PARTRAIN_WORLD", "2"}, {"PARTRAIN_NODE_RANKS", "0,1"}, {"PARTRAIN_COORDINATOR", "h"}});
  ASSERT_FALSE(port);
  EXPECT_EQ(port.status().message(), "PARTRAIN_COORDINATOR=h: need host:port");

  // Port 0 (any free port) needs the state directory the coordinator publishes it in.
  Result<Placement> unpublished = placement_from(
      o, {{"PARTRAIN_WORLD", "2"}, {"PARTRAIN_NODE_RANKS", "0,1"}, {"PARTRAIN_COORDINATOR", "h:0"}});
  ASSERT_FALSE(unpublished);
  EXPECT_NE(unpublished.status().message().find("PARTRAIN_STATE_DIR, where the coordinator publishes the one it "
                                                "binds, is not set"), std::string::npos)
      << unpublished.status().message();
  Result<Placement> published = placement_from(o, {{"PARTRAIN_WORLD", "2"}, {"PARTRAIN_NODE_RANKS", "0,1"},
                                                   {"PARTRAIN_COORDINATOR", "h:0"}, {"PARTRAIN_STATE_DIR", "/s/slurm-9"},
                                                   {"SLURM_STEP_ID", "3"}});
  ASSERT_TRUE(published) << published.status().message();
  EXPECT_EQ(published->coordinator_port, 0);
  EXPECT_EQ(published->state_dir, "/s/slurm-9");
  EXPECT_EQ(published->step_id, "3");

  AgentOptions standalone;
  standalone.standalone = true;
  Result<Placement> nproc = placement_from(standalone, {});
  ASSERT_FALSE(nproc);
  EXPECT_EQ(nproc.status().message(), "--nproc: need at least 1 local rank with --standalone");
}

}  // namespace
}  // namespace partrain::agent
