// See cpu_binding.h.
#include "agent/cpu_binding.h"

#include <sched.h>

#include <hwloc.h>

namespace partrain::agent {

Result<CoreList> allowed_cores() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
    return Status::unavailable("sched_getaffinity failed: cannot read the CPUs this agent may use");
  }
  hwloc_topology_t topo = nullptr;
  if (hwloc_topology_init(&topo) != 0 || hwloc_topology_load(topo) != 0) {
    if (topo != nullptr) hwloc_topology_destroy(topo);
    return Status::unavailable("hwloc could not read this node's topology; workers stay unbound");
  }
  CoreList cores;
  const int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  for (int i = 0; i < n; ++i) {
    hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, static_cast<unsigned>(i));
    std::vector<int> cpus;
    unsigned pu = 0;
    hwloc_bitmap_foreach_begin(pu, core->cpuset) {
      // hwloc already leaves out disallowed CPUs; the mask check also covers sched_setaffinity.
      if (pu < CPU_SETSIZE && CPU_ISSET(pu, &allowed)) cpus.push_back(static_cast<int>(pu));
    }
    hwloc_bitmap_foreach_end();
    if (!cpus.empty()) cores.push_back(std::move(cpus));
  }
  hwloc_topology_destroy(topo);
  if (cores.empty()) return Status::unavailable("hwloc found no allowed cores; workers stay unbound");
  return cores;
}

std::vector<std::vector<int>> cpus_per_rank(const CoreList& cores, int nlocal) {
  std::vector<std::vector<int>> out(static_cast<size_t>(nlocal > 0 ? nlocal : 0));
  const size_t n = cores.size();
  if (n == 0) return out;
  for (int r = 0; r < nlocal; ++r) {
    size_t first = 0, end = 0;
    if (n >= static_cast<size_t>(nlocal)) {
      first = static_cast<size_t>(r) * n / static_cast<size_t>(nlocal);
      end = static_cast<size_t>(r + 1) * n / static_cast<size_t>(nlocal);
    } else {
      first = static_cast<size_t>(r) % n;
      end = first + 1;
    }
    for (size_t c = first; c < end; ++c) {
      out[static_cast<size_t>(r)].insert(out[static_cast<size_t>(r)].end(), cores[c].begin(), cores[c].end());
    }
  }
  return out;
}

}  // namespace partrain::agent
