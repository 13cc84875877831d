// A Slurm node name becomes the NodeAddr Slurm shows for it; numeric addresses pass as they
// are; when scontrol cannot answer, the name is kept and the reason given. The real
// scontrol against a real slurmctld is exercised by tests/slurm/train_test.sh.
#include <gtest/gtest.h>

#include "agent/node_address.h"

namespace partrain::agent {
namespace {

// Two lines as `scontrol -o show node` (Slurm 22.05) prints them, shortened by hand.
const char* kTwoNodes =
    "NodeName=n1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 Gres=gpu:4 NodeAddr=127.0.0.1 "
    "NodeHostName=vm Port=16818 Version=22.05.8 State=IDLE Partitions=debug\n"
    "NodeName=n12 Arch=x86_64 Gres=gpu:4 NodeAddr=10.1.0.12 NodeHostName=gpu12 Port=6818 "
    "State=MIXED Partitions=debug\n";

TEST(NodeAddress, ParsesTheNamedNodesNodeAddr) {
  EXPECT_EQ(parse_node_addr(kTwoNodes, "n1"), "127.0.0.1");
  EXPECT_EQ(parse_node_addr(kTwoNodes, "n12"), "10.1.0.12");
  EXPECT_EQ(parse_node_addr(kTwoNodes, "n2"), std::nullopt);
  EXPECT_EQ(parse_node_addr("Node n9 not found\n", "n9"), std::nullopt);
  EXPECT_EQ(parse_node_addr("NodeName=n3 Arch=x86_64 State=IDLE\n", "n3"), std::nullopt);
}

TEST(NodeAddress, NumericAddressesAndLocalhostAreNotLookedUp) {
  std::string why;
  // A program that cannot exist: had it been run, why would say so.
  EXPECT_EQ(slurm_node_address("10.2.3.4", "/nonexistent/scontrol", &why), "10.2.3.4");
  EXPECT_EQ(slurm_node_address("fe80::1", "/nonexistent/scontrol", &why), "fe80::1");
  EXPECT_EQ(slurm_node_address("localhost", "/nonexistent/scontrol", &why), "localhost");
  EXPECT_EQ(why, "");
}

TEST(NodeAddress, KeepsTheNameWithAReasonWhenScontrolCannotAnswer) {
  std::string why;
  EXPECT_EQ(slurm_node_address("n1", "/nonexistent/scontrol", &why), "n1");
  EXPECT_EQ(why, "'/nonexistent/scontrol' is not on PATH");
  why.clear();
  EXPECT_EQ(slurm_node_address("n1", "false", &why), "n1");
  EXPECT_EQ(why, "'false -o show node n1' exited 1: no output");
  why.clear();
  // `true` answers with nothing: no NodeAddr for the node.
  EXPECT_EQ(slurm_node_address("n1", "true", &why), "n1");
  EXPECT_EQ(why, "'true -o show node n1' shows no NodeAddr");
}

}  // namespace
}  // namespace partrain::agent
