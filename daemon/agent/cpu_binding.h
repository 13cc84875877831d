// Which CPUs each local worker may run on. The agent's allowed CPUs (its Slurm cgroup or
// affinity mask) are read from the hardware topology (hwloc) as cores in topology order
// (package, NUMA node, core), and each local rank gets a contiguous block of whole cores
// with all their hardware threads: a rank's OpenMP/OpenBLAS threads then share caches and
// one memory controller instead of being scattered over sockets. With fewer cores than
// ranks, ranks share cores round robin.
//
// At scale: on a 2-socket, 8-GPU node with 64 cores, ranks 0-3 get 8 cores each on socket 0
// and ranks 4-7 on socket 1, next to the GPUs and NICs that the usual PCIe layout puts
// there; Slurm's --cpus-per-task / cgroup limits are respected because only allowed CPUs
// appear in the topology.
#pragma once

#include <vector>

#include "common/status.h"

namespace partrain::agent {

// The CPU numbers (OS indexes) of each core, in topology order.
using CoreList = std::vector<std::vector<int>>;

// The cores this process may use, from hwloc; unavailable naming hwloc when it fails.
Result<CoreList> allowed_cores();

// The CPUs of each of `nlocal` ranks: rank i gets cores [i*n/nlocal, (i+1)*n/nlocal) of the
// n cores (every core to exactly one rank), or, when n < nlocal, core i % n.
std::vector<std::vector<int>> cpus_per_rank(const CoreList& cores, int nlocal);

}  // namespace partrain::agent
