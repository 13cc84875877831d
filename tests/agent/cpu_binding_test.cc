// CPU binding of the workers: the split of cores over local ranks (hand arithmetic), that
// hwloc's view covers exactly the CPUs this process may use, and that spawned workers really
// run on their block (read back from /proc/self/status by the worker itself).
#include "agent/cpu_binding.h"

#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "agent/supervisor.h"

namespace partrain::agent {
namespace {

CoreList cores_of(int n, int threads_per_core) {
  CoreList cores;
  for (int c = 0; c < n; ++c) {
    std::vector<int> pus;
    for (int t = 0; t < threads_per_core; ++t) pus.push_back(c + t * n);  // Linux numbers siblings last
    cores.push_back(pus);
  }
  return cores;
}

TEST(CpusPerRank, ContiguousBlocksOfWholeCores) {
  // 8 cores with 2 hardware threads over 4 ranks: 2 whole cores each, siblings included.
  const auto r = cpus_per_rank(cores_of(8, 2), 4);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0], (std::vector<int>{0, 8, 1, 9}));
  EXPECT_EQ(r[3], (std::vector<int>{6, 14, 7, 15}));
}

TEST(CpusPerRank, UnevenSplitGivesEveryCoreToExactlyOneRank) {
  // 10 cores over 4 ranks: floor(i*10/4) boundaries 0, 2, 5, 7, 10 -> 2, 3, 2, 3 cores.
  const auto r = cpus_per_rank(cores_of(10, 1), 4);
  EXPECT_EQ(r[0], (std::vector<int>{0, 1}));
  EXPECT_EQ(r[1], (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(r[2], (std::vector<int>{5, 6}));
  EXPECT_EQ(r[3], (std::vector<int>{7, 8, 9}));
}

TEST(CpusPerRank, FewerCoresThanRanksShareRoundRobin) {
  const auto r = cpus_per_rank(cores_of(2, 1), 5);
  ASSERT_EQ(r.size(), 5u);
  EXPECT_EQ(r[0], std::vector<int>{0});
  EXPECT_EQ(r[1], std::vector<int>{1});
  EXPECT_EQ(r[4], std::vector<int>{0});
}

TEST(AllowedCores, CoverExactlyTheAffinityMask) {
  Result<CoreList> cores = allowed_cores();
  ASSERT_TRUE(cores.is_ok()) << cores.status().message();
  cpu_set_t allowed;
  ASSERT_EQ(::sched_getaffinity(0, sizeof allowed, &allowed), 0);
  std::multiset<int> seen;
  for (const auto& core : *cores) seen.insert(core.begin(), core.end());
  EXPECT_EQ(static_cast<int>(seen.size()), CPU_COUNT(&allowed));
  for (int cpu : seen) {
    EXPECT_TRUE(CPU_ISSET(cpu, &allowed)) << cpu;
    EXPECT_EQ(seen.count(cpu), 1u) << cpu;
  }
}

// The list form of /proc's Cpus_allowed_list ("0-3,8") as CPU numbers.
std::set<int> parse_cpu_list(const std::string& text) {
  std::set<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t dash = item.find('-');
    const int a = std::atoi(item.c_str());
    const int b = dash == std::string::npos ? a : std::atoi(item.c_str() + dash + 1);
    for (int c = a; c <= b; ++c) out.insert(c);
  }
  return out;
}

TEST(WorkerGroup, EachWorkerRunsOnItsOwnBlock) {
  Result<CoreList> cores = allowed_cores();
  ASSERT_TRUE(cores.is_ok()) << cores.status().message();
  const int nlocal = 2;
  char tmpl[] = "/tmp/partrain-binding-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  std::vector<WorkerSpec> specs;
  for (int r = 0; r < nlocal; ++r) specs.push_back(WorkerSpec{r, r, {{"OUT", dir + "/" + std::to_string(r)}}});
  WorkerGroup group;
  ASSERT_TRUE(group.spawn("/bin/sh", {"-c", "sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status > \"$OUT\""},
                          specs).is_ok());
  for (int i = 0; i < 200 && group.running() > 0; ++i) {
    group.poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const auto expected = cpus_per_rank(*cores, nlocal);
  for (int r = 0; r < nlocal; ++r) {
    std::ifstream f(dir + "/" + std::to_string(r));
    std::string line;
    std::getline(f, line);
    const std::set<int> want(expected[static_cast<size_t>(r)].begin(), expected[static_cast<size_t>(r)].end());
    EXPECT_EQ(parse_cpu_list(line), want) << "rank " << r << ": " << line;
  }
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace partrain::agent
