// The threads a command may run (common/cpu_budget.h): cgroup quotas as the kernel writes
// them, the cap by the affinity mask, and the precedence --threads > OMP_NUM_THREADS > the
// CPUs this process may use (checked against sched_getaffinity, read here independently).
#include "common/cpu_budget.h"

#include <sched.h>
#include <stdlib.h>

#include <gtest/gtest.h>

namespace partrain {
namespace {

TEST(CpuBudget, CgroupQuotas) {
  EXPECT_FALSE(quota_from_cpu_max("max 100000"));
  EXPECT_DOUBLE_EQ(*quota_from_cpu_max("150000 100000"), 1.5);
  EXPECT_DOUBLE_EQ(*quota_from_cpu_max("200000 100000\n"), 2.0);
  EXPECT_FALSE(quota_from_cpu_max(""));
  EXPECT_FALSE(quota_from_cfs("-1", "100000"));  // cgroup v1: no limit
  EXPECT_DOUBLE_EQ(*quota_from_cfs("50000", "100000"), 0.5);
}

TEST(CpuBudget, QuotaCapsTheAffinityMask) {
  EXPECT_EQ(cpus_within(64, 1.5), 2);   // a container given 1.5 CPUs of 64
  EXPECT_EQ(cpus_within(64, 0.5), 1);   // never 0
  EXPECT_EQ(cpus_within(4, 16.0), 4);   // the mask is the smaller
  EXPECT_EQ(cpus_within(8, std::nullopt), 8);
  EXPECT_EQ(cpus_within(3, 2.0), 2);    // exactly 2 CPUs' worth
}

TEST(CpuBudget, FlagThenEnvironmentThenTheProcessesCpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  const int mask = CPU_COUNT(&set);
  ::unsetenv("OMP_NUM_THREADS");
  EXPECT_GE(thread_count(), 1);
  EXPECT_LE(thread_count(), mask);
  EXPECT_EQ(thread_count(), usable_cpus());
  ::setenv("OMP_NUM_THREADS", "3,2", 1);  // OpenMP's nested list: the first level
  EXPECT_EQ(thread_count(), 3);
  EXPECT_EQ(thread_count(5), 5);
  ::setenv("OMP_NUM_THREADS", "junk", 1);
  EXPECT_EQ(thread_count(), usable_cpus());
  ::unsetenv("OMP_NUM_THREADS");
}

}  // namespace
}  // namespace partrain
