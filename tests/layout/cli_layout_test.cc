// Runs the built `partrain layout` as a user would: the issue's 64-GPU example (tp4,pp2 on
// 8 nodes x 8 GPUs) for block and cyclic distribution, read back from --json; bad input
// exits 2 with one line on stderr; --help describes every option.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "test_util.h"

#ifndef PARTRAIN_CLI
#error "PARTRAIN_CLI must name the partrain executable"
#endif

namespace {

using partrain::testing::Outcome;

// `partrain ARGS` as a user types it.
Outcome run(const std::string& args) {
  return partrain::testing::run_shell(std::string("'") + PARTRAIN_CLI + "' " + args);
}

struct RankRow {
  int rank, task, node_index, local, tp, ep, dp, pp;
  std::string node;
};

// The value after "key": in one flat JSON object (no nesting inside a rank row).
std::string field(const std::string& object, const std::string& key) {
  const std::string tag = "\"" + key + "\":";
  size_t at = object.find(tag);
  if (at == std::string::npos) return "";
  at += tag.size();
  if (object[at] == '"') return object.substr(at + 1, object.find('"', at + 1) - at - 1);
  return object.substr(at, object.find_first_of(",}", at) - at);
}

int int_field(const std::string& object, const std::string& key) {
  const std::string v = field(object, key);
  return v.empty() ? -1 : std::stoi(v);
}

std::vector<RankRow> parse_ranks(const std::string& json) {
  std::vector<RankRow> rows;
  for (size_t at = json.find("{\"rank\":"); at != std::string::npos;
       at = json.find("{\"rank\":", at + 1)) {
    const std::string object = json.substr(at, json.find('}', at) - at + 1);
    rows.push_back({int_field(object, "rank"), int_field(object, "task"),
                    int_field(object, "node_index"), int_field(object, "local"),
                    int_field(object, "tp"), int_field(object, "ep"), int_field(object, "dp"),
                    int_field(object, "pp"), field(object, "node")});
  }
  return rows;
}

class CliLayoutTest : public ::testing::TestWithParam<const char*> {};

TEST_P(CliLayoutTest, SixtyFourGpusKeepTpInNodesAndPpOutermost) {
  const std::string dist = GetParam();
  Outcome r = run("layout --partrain=tp4,pp2 --nodes 8 --gpus-per-node 8 --distribution " + dist +
              " --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find(R"({"world":64,"tp":4,"pp":2,"dp":8,"ep":1,)"), std::string::npos)
      << r.out.substr(0, 200);
  std::vector<RankRow> rows = parse_ranks(r.out);
  ASSERT_EQ(rows.size(), 64u);
  std::map<int, std::set<std::string>> tp_group_nodes;
  std::set<int> tasks;
  std::set<std::pair<std::string, int>> devices;
  for (int i = 0; i < 64; ++i) {
    const RankRow& row = rows[i];
    EXPECT_EQ(row.rank, i);
    // rank = tp + 4 * dp + 32 * pp (Megatron order, pp outermost).
    EXPECT_EQ(row.tp, i % 4);
    EXPECT_EQ(row.dp, (i / 4) % 8);
    EXPECT_EQ(row.pp, i / 32);
    EXPECT_EQ(row.ep, 0);
    EXPECT_EQ(row.node, "n" + std::to_string(row.node_index + 1));
    tp_group_nodes[i / 4].insert(row.node);
    tasks.insert(row.task);
    devices.insert({row.node, row.local});
    // Where Slurm runs task p: block fills n1 first; cyclic deals round-robin.
    if (dist == "block") {
      EXPECT_EQ(row.node_index, row.task / 8);
      EXPECT_EQ(row.local, row.task % 8);
    } else {
      EXPECT_EQ(row.node_index, row.task % 8);
      EXPECT_EQ(row.local, row.task / 8);
    }
    // Stage 0 on the first half of the nodes, stage 1 on the second.
    EXPECT_EQ(row.node_index / 4, row.pp);
  }
  EXPECT_EQ(tasks.size(), 64u);    // every task plays one rank
  EXPECT_EQ(devices.size(), 64u);  // every GPU used once
  for (const auto& [group, nodes] : tp_group_nodes) {
    EXPECT_EQ(nodes.size(), 1u) << "TP group " << group << " spans nodes";
  }
  EXPECT_NE(r.out.find(R"("tp_domain_local":true)"), std::string::npos);
  EXPECT_NE(r.out.find(R"("pp":[[0,32],[1,33],)"), std::string::npos);
  EXPECT_NE(r.out.find(R"("tp":[[0,1,2,3],[4,5,6,7],)"), std::string::npos);
  EXPECT_NE(r.out.find(R"("cost":{"unit":"bytes per training step","aware":{"links":)"),
            std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Distributions, CliLayoutTest, ::testing::Values("block", "cyclic"));

TEST(CliLayoutErrorsTest, BadInputExitsTwoWithOneLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"layout --partrain=tpx --nodes 2 --gpus-per-node 4",
       "partrain: 'tpx' in --partrain: tp needs a positive whole number, e.g. tp4\n"},
      {"layout --partrain=tp3 --nodes 3 --gpus-per-node 4",
       "partrain: tp3 does not divide 4 GPUs per node; use a tp that divides 4 (1, 2, 4)\n"},
      {"layout --partrain=tp4,pp2 --nodes 3 --gpus-per-node 2",
       "partrain: world size 6 is not a multiple of tp4 x pp2 = 8; use a multiple of 8 ranks "
       "or smaller tp/pp\n"},
      {"layout --partrain=tp2 --nodes 2 --gpus-per-node 4 --distribution plane",
       "partrain: task distribution 'plane' is not supported; use block or cyclic\n"},
      {"layout --partrain=tp2 --nodes 2 --gpus-per-node 4 --topology /nonexistent/topo.conf",
       "partrain: cannot read topology file '/nonexistent/topo.conf'; check the path given to "
       "--topology\n"},
      {"layout --partrain=tp2 --gpus-per-node 4",
       "partrain: layout needs the allocation size; give --nodes N (or --nodelist)\n"},
  };
  for (const auto& [args, message] : cases) {
    SCOPED_TRACE(args);
    Outcome r = run(args);
    EXPECT_EQ(r.rc, 2);
    EXPECT_EQ(r.err, message);
    EXPECT_EQ(r.out, "");
  }
  // CLI11's own parse errors (missing required option) also exit 2 with one line.
  Outcome r = run("layout --nodes 2 --gpus-per-node 4");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(CliLayoutErrorsTest, TopologyFileErrorsNameTheLine) {
  const partrain::testing::ScratchDir dir;
  const std::string path = (dir.path() / "topology.conf").string();
  {
    std::ofstream out(path);
    out << "SwitchName=s1 Nodes=n[1-2]\nSwitchName=s2 Nodes=n[3-4\n";
  }
  Outcome r = run("layout --partrain=tp2 --nodes 4 --gpus-per-node 2 --topology " + path);
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err, "partrain: " + path + ":2: Nodes= 'n[3-4': missing ']'; write e.g. n[1-4,7]\n");
  {
    std::ofstream out(path);
    out << "SwitchName=s1 Nodes=n[1,3]\nSwitchName=s2 Nodes=n[2,4]\nSwitchName=top "
           "Switches=s[1-2]\n";
  }
  r = run("layout --partrain=tp2,pp2 --nodes 4 --gpus-per-node 2 --topology " + path + " --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  std::vector<RankRow> rows = parse_ranks(r.out);
  ASSERT_EQ(rows.size(), 8u);
  // Stage 0 (ranks 0-3) on one leaf (n1, n3), stage 1 on the other (n2, n4).
  for (const RankRow& row : rows) {
    EXPECT_EQ(row.node_index % 2, row.pp) << "rank " << row.rank << " on " << row.node;
  }
}

TEST(CliLayoutHelpTest, HelpDescribesEveryOption) {
  Outcome r = run("layout --help");
  EXPECT_EQ(r.rc, 0);
  for (const char* option :
       {"--partrain", "--nodes", "--gpus-per-node", "--nvlink-domain", "--distribution",
        "--topology", "--nodelist", "--tasks-per-node", "--json", "--params", "--hidden",
        "--layers", "--seq-len", "--micro-batch", "--grad-accum", "--expert-params"}) {
    EXPECT_NE(r.out.find(option), std::string::npos) << option;
  }
  Outcome text = run("layout --partrain=tp4,pp2 --nodes 8 --gpus-per-node 8 --distribution cyclic");
  EXPECT_EQ(text.rc, 0);
  EXPECT_NE(text.out.find("TP groups each inside one NVLink domain"), std::string::npos);
  EXPECT_NE(text.out.find("topology-aware"), std::string::npos);
}

}  // namespace
