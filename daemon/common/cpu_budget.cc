#include "common/cpu_budget.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace partrain {
namespace {

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::optional<double> number(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str()) return std::nullopt;
  return v;
}

// The process's cgroup path for `controller` ("" = the v2 unified one) from /proc/self/cgroup
// lines "ID:CONTROLLERS:PATH".
std::optional<std::string> own_cgroup(const std::string& controller) {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string list = line.substr(a + 1, b - a - 1);
    std::istringstream names(list);
    bool match = controller.empty() && list.empty();
    for (std::string n; !controller.empty() && std::getline(names, n, ',');) match = match || n == controller;
    if (match) return line.substr(b + 1);
  }
  return std::nullopt;
}

}  // namespace

std::optional<double> quota_from_cpu_max(const std::string& text) {
  std::istringstream in(text);
  std::string quota, period;
  if (!(in >> quota >> period) || quota == "max") return std::nullopt;
  const std::optional<double> q = number(quota), p = number(period);
  if (!q || !p || *q <= 0 || *p <= 0) return std::nullopt;
  return *q / *p;
}

std::optional<double> quota_from_cfs(const std::string& quota_us, const std::string& period_us) {
  const std::optional<double> q = number(quota_us), p = number(period_us);
  if (!q || !p || *q <= 0 || *p <= 0) return std::nullopt;
  return *q / *p;
}

int cpus_within(int affinity, std::optional<double> quota) {
  int n = std::max(1, affinity);
  if (quota) n = std::min(n, static_cast<int>(std::ceil(*quota - 1e-9)));
  return std::max(1, n);
}

int usable_cpus(const std::string& cgroup_root) {
  cpu_set_t set;
  CPU_ZERO(&set);
  int affinity = ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  std::optional<double> quota;
  if (std::optional<std::string> v2 = own_cgroup("")) {
    quota = quota_from_cpu_max(first_line(cgroup_root + *v2 + "/cpu.max"));
  }
  if (!quota) {
    if (std::optional<std::string> v1 = own_cgroup("cpu")) {
      const std::string dir = cgroup_root + "/cpu" + *v1;
      quota = quota_from_cfs(first_line(dir + "/cpu.cfs_quota_us"), first_line(dir + "/cpu.cfs_period_us"));
    }
  }
  return cpus_within(affinity, quota);
}

int thread_count(int flag) {
  if (flag > 0) return flag;
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env != nullptr) {
    const long n = std::strtol(env, nullptr, 10);
    if (n > 0) return static_cast<int>(std::min<long>(n, 4096));
  }
  return usable_cpus();
}

}  // namespace partrain
