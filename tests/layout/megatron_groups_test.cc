// Every group of every axis equals the group Megatron-core builds, on a grid of layouts
// (world up to 32; tp 1, 2, 4; cp 1, 2, 4; pp 1, 2; ep 1, 2, 4; every combination Megatron
// accepts). The reference is megatron/groups.txt, written by megatron/megatron_groups.py:
// Megatron-core's own RankGenerator and generate_masked_orthogonal_rank_groups, copied
// verbatim, driven as initialize_model_parallel drives them (the dense grid for tp, cp, dp,
// dp-cp, pp and tp-pp; the expert grid for ep and the expert-data-parallel group).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "layout/layout.h"

namespace partrain {
namespace {

using Groups = std::vector<std::vector<int>>;

Groups parse_groups(const std::string& text) {
  Groups out;
  std::stringstream all(text);
  std::string group;
  while (std::getline(all, group, ';')) {
    std::vector<int> members;
    std::stringstream g(group);
    std::string r;
    while (std::getline(g, r, ',')) members.push_back(std::stoi(r));
    out.push_back(members);
  }
  return out;
}

Axis axis_of(const std::string& name) {
  for (Axis a : kAllAxes) {
    if (axis_name(a) == name) return a;
  }
  ADD_FAILURE() << "unknown axis " << name;
  return Axis::kTp;
}

TEST(MegatronGroupsTest, EveryAxisMatchesMegatronCore) {
  std::ifstream in(std::string(PARTRAIN_SOURCE_DIR) + "/tests/layout/megatron/groups.txt");
  ASSERT_TRUE(in) << "tests/layout/megatron/groups.txt";
  std::string line;
  int lines = 0, cp_and_ep = 0;
  std::map<std::string, int> per_axis;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t colon = line.find(':');
    std::stringstream head(line.substr(0, colon));
    int world = 0, tp = 0, cp = 0, pp = 0, ep = 0;
    std::string name;
    head >> world >> tp >> cp >> pp >> ep >> name;
    ParallelSpec spec;
    spec.tp = tp;
    spec.cp = cp;
    spec.pp = pp;
    spec.ep = ep;
    SCOPED_TRACE(line.substr(0, colon));
    Result<Layout> l = Layout::create(world, spec);
    ASSERT_TRUE(l.is_ok()) << l.status().message();
    EXPECT_EQ(l->groups(axis_of(name)), parse_groups(line.substr(colon + 2)));
    ++lines;
    ++per_axis[name];
    if (cp > 1 && ep > 1) ++cp_and_ep;
  }
  // Every axis of partrain's is covered, with cp and ep both above 1 on many layouts.
  EXPECT_EQ(per_axis.size(), kAllAxes.size());
  EXPECT_GT(lines, 1500);
  EXPECT_GT(cp_and_ep, 200);
}

}  // namespace
}  // namespace partrain
