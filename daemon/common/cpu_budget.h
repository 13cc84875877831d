// How many threads a command on this machine may run: the CPUs of the process's affinity
// mask (taskset, Slurm's binding), capped by its cgroup's CPU quota (a container or a job
// step given 1.5 CPUs of 64 gets 2 threads, not 64), unless OMP_NUM_THREADS or a --threads
// option says otherwise. `partrain generate`, `data encode` and `plan` use it; training
// workers get their CPUs from the agent (agent/cpu_binding.h).
#pragma once

#include <optional>
#include <string>

namespace partrain {

// CPUs of a cgroup v2 cpu.max ("150000 100000" -> 1.5; "max 100000" -> none) or of cgroup
// v1's cpu.cfs_quota_us and cpu.cfs_period_us (-1 quota -> none).
std::optional<double> quota_from_cpu_max(const std::string& text);
std::optional<double> quota_from_cfs(const std::string& quota_us, const std::string& period_us);

// min(affinity, ceil(quota)), at least 1.
int cpus_within(int affinity, std::optional<double> quota);

// The CPUs this process may use now: its affinity mask and its cgroup's quota (v2 or v1,
// read under `cgroup_root`, default /sys/fs/cgroup, for the process's own cgroup).
int usable_cpus(const std::string& cgroup_root = "/sys/fs/cgroup");

// The threads to run: `flag` when > 0 (--threads), else OMP_NUM_THREADS when it holds a
// positive number (its first, as OpenMP reads a list), else usable_cpus().
int thread_count(int flag = 0);

}  // namespace partrain
