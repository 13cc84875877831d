// NCCL's cost model for one collective (see collectives.h).
#include "planner/collectives.h"

#include <algorithm>
#include <cmath>

namespace partrain::planner {
namespace {

double inter_link(const GroupSpan& g, const HardwareProfile& hw) {
  return g.across_switches ? hw.inter_switch_bandwidth : hw.inter_bandwidth;
}

}  // namespace

double bus_bandwidth(const GroupSpan& g, const HardwareProfile& hw) {
  if (g.nodes <= 1) return hw.intra_bandwidth;
  return std::min(hw.intra_bandwidth, std::max(1, g.per_node) * inter_link(g, hw));
}

double collective_seconds(Collective c, double bytes, const GroupSpan& g, const HardwareProfile& hw) {
  const double n = g.ranks;
  if (g.ranks <= 1 || bytes <= 0) return 0;
  const double nodes = std::max(1, g.nodes);
  const double bw = bus_bandwidth(g, hw);
  if (c == Collective::kAllToAll) {
    // Each member sends (n-1)/n of its bytes; what goes to other nodes leaves over its NIC.
    const double k = std::max(1, g.per_node);
    const double off_node = bytes * (n - k) / n, on_node = bytes * (k - 1) / n;
    return hw.collective_latency + (nodes > 1 ? hw.inter_latency : hw.intra_latency) +
           std::max(off_node / inter_link(g, hw), on_node / hw.intra_bandwidth);
  }
  const bool all_reduce = c == Collective::kAllReduce;
  const double steps = all_reduce ? 2 * (n - 1) : n - 1;
  const double inter_steps = nodes <= 1 ? 0 : all_reduce ? 2 * (nodes - 1) : nodes - 1;
  const double ring = hw.collective_latency + (steps - inter_steps) * hw.intra_latency +
                      inter_steps * hw.inter_latency + (steps / n) * bytes / bw;
  if (!all_reduce || nodes <= 1) return ring;
  const double k = std::max(1, g.per_node);
  const double tree = hw.collective_latency +
                      2 * ((k - 1) * hw.intra_latency + std::log2(nodes) * hw.inter_latency) +
                      2 * bytes / (0.92 * bw);
  return std::min(ring, tree);
}

double send_seconds(double bytes, bool other_node, bool across_switches, const HardwareProfile& hw) {
  if (bytes <= 0) return 0;
  if (!other_node) return hw.intra_latency + bytes / hw.intra_bandwidth;
  const double bw = across_switches ? hw.inter_switch_bandwidth : hw.inter_bandwidth;
  return hw.inter_latency + bytes / bw;
}

}  // namespace partrain::planner
