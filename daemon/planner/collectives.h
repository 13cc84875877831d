// How long a collective takes, as NCCL runs and costs it (src/graph/tuning.cc of NCCL
// 2.2x: ncclTopoTuneModel and ncclTopoGetAlgoTime): time = latency + bytes / bandwidth,
// with the ring and, for an all-reduce across nodes, the tree algorithm, whichever is
// faster.
//
// Bandwidth. A ring moves its bytes at its bus bandwidth B: inside one node the profile's
// intra_node_bandwidth (NCCL's NVLink links x per-link bandwidth); across nodes every
// ring through the node leaves it over the NICs of the group's members on that node
// (rail-optimized: each device drives its own NIC), so B = min(intra, k x inter) with k
// the group's members per node and inter the profile's inter_node_bandwidth (per device;
// inter_switch_bandwidth when the group spans leaf switches). An all-reduce of S bytes
// over n ranks takes 2 (n-1)/n S / B, a reduce-scatter or all-gather of an S-byte buffer
// (n-1)/n S / B, the tree all-reduce 2 S / (0.92 B) (NCCL's tree: 0.92 of the bus
// bandwidth, algorithm bandwidth half of it).
//
// Latency. Ring: collective_latency + the ring's steps, each intra_node_latency inside a
// node and inter_node_latency across: 2 (n-1) steps for an all-reduce of which 2 (nodes-1)
// cross nodes (n-1 and nodes-1 for reduce-scatter and all-gather). Tree all-reduce:
// collective_latency + 2 ((k-1) intra + log2(nodes) inter).
//
// Worked example, H100-SXM profile (370.8e9 intra, 48e9 inter per device, latencies
// 8.4 us, 3.4 us, 14 us): all-reduce of 64 MiB over 8 devices of one node: ring latency
// 8.4 + 14 x 3.4 = 56 us, bandwidth 2 x 7/8 x 67.1e6 / 370.8e9 = 317 us: 373 us. The same
// over 64 nodes, one device per node (a dp group under tp8): B = min(370.8, 48) e9; the
// ring pays 8.4 + 126 x 14 us = 1.77 ms + 2.75 ms, the tree 8.4 + 2 x 6 x 14 = 176 us +
// 2 x 67.1e6 / (0.92 x 48e9) = 3.04 ms: NCCL takes the tree, 3.22 ms.
#pragma once

#include "planner/hardware.h"

namespace partrain::planner {

// Where a group's members sit.
struct GroupSpan {
  int ranks = 1;     // members
  int nodes = 1;     // distinct nodes they occupy
  int per_node = 1;  // members on each of those nodes (the fewest)
  bool across_switches = false;  // the members hang off more than one leaf switch
};

enum class Collective { kAllReduce, kReduceScatter, kAllGather, kAllToAll };

// Seconds for one collective over `g`. `bytes` is the buffer each member holds before an
// all-reduce, reduce-scatter or all-to-all (what it sends in total for the last), and
// after an all-gather.
double collective_seconds(Collective c, double bytes, const GroupSpan& g, const HardwareProfile& hw);

// Seconds to send `bytes` to one peer, on another node or not.
double send_seconds(double bytes, bool other_node, bool across_switches, const HardwareProfile& hw);

// The bus bandwidth a ring over `g` runs at (see above).
double bus_bandwidth(const GroupSpan& g, const HardwareProfile& hw);

}  // namespace partrain::planner
