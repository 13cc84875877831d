// Bytes per training step crossing each link class for a mapping, from ring-algorithm
// volumes. A collective over a group runs as a ring in the group's member order; each
// ring edge (member i -> member i+1, last -> first) carries what one member sends to its
// successor, and counts against the link class between those two members' nodes.
//
// Per training step (m = grad_accum micro-batches, A = micro_batch * seq_len / cp * hidden *
// bytes_per_element = one micro-batch's activations on a rank (context parallelism splits
// the sequence), L = layers, n = group size):
//   TP  4 all-reduces of A per layer per micro-batch (2 forward, 2 backward: Megatron's
//       f/g operators; reduce-scatter + all-gather under sequence parallelism move the
//       same bytes). An all-reduce of S sends 2(n-1)/n * S along every ring edge. Each
//       TP group runs the L/pp layers of its stage.
//   CP  ring attention: per layer per micro-batch each rank passes its K and V shard
//       (2 * A * kv_hidden / (hidden * tp): K and V are kv_heads wide under GQA) around
//       the ring n-1 times forward and twice that backward.
//   DP  one all-reduce per step of the rank's dense gradients, params / (tp * pp) *
//       bytes_per_element, over the dp x cp group (cp ranks hold the same weights):
//       2(n-1)/n * S per edge (3(n-1)/n with zero3, which also all-gathers parameters for
//       the backward pass). Expert gradients, expert_params / (tp * pp * ep), go over the
//       expert_dp x cp group.
//   PP  point to point along the pp group (no wrap-around): per micro-batch and edge the
//       forward activation and the backward gradient, A / tp each (each TP rank sends its
//       share). Interleaved with V virtual stages uses every edge V times plus the
//       last -> first edge V-1 times.
//   EP  4 all-to-alls per MoE layer per micro-batch (dispatch and combine, forward and
//       backward), each rank sending top_k * A / tp split evenly over the n members,
//       counted pairwise (an all-to-all is not a ring).
// Part of the layout core: standard library only.
#pragma once

#include <array>
#include <vector>

#include "layout/layout.h"
#include "layout/mapping.h"
#include "layout/topology.h"

namespace partrain {

// What one training step moves. Defaults: a GPT-3 XL sized model (1.3B parameters).
struct StepSizes {
  double params = 1.3e9;        // dense parameters of the whole model. Default: 1.3e9
  double expert_params = 0;     // parameters in experts, all experts together. Default: 0
  int hidden = 2048;            // hidden size. Default: 2048
  int seq_len = 2048;           // tokens per sequence. Default: 2048
  int micro_batch = 1;          // sequences per micro-batch. Default: 1
  int grad_accum = 8;           // micro-batches per step (the pipeline's m). Default: 8
  int layers = 24;              // transformer layers. Default: 24
  int bytes_per_element = 2;    // bf16 activations and gradients. Default: 2
  int top_k = 2;                // experts per token (EP). Default: 2
  int moe_layers = -1;          // MoE layers; -1 = every layer when ep > 1. Default: -1
  int kv_hidden = 0;            // width of K (and of V), kv_heads * head_dim; 0 = hidden. Default: 0
};

// Bytes per step by link class, indexed by LinkClass.
struct LinkBytes {
  std::array<double, kNumLinkClasses> bytes{};
  double& operator[](LinkClass c) { return bytes[static_cast<int>(c)]; }
  double operator[](LinkClass c) const { return bytes[static_cast<int>(c)]; }
  double total() const { return bytes[0] + bytes[1] + bytes[2]; }
  // Bytes that leave a node (inter-node + inter-switch).
  double off_node() const { return bytes[1] + bytes[2]; }
  LinkBytes& operator+=(const LinkBytes& o);
};

struct StepCost {
  LinkBytes total;
  LinkBytes tp, cp, dp, ep, pp;  // the same, by the axis that sends them
};

StepCost step_cost(const Layout& layout, const SlurmView& view, const Mapping& mapping,
                   const StepSizes& sizes = {});

// The groups that reduce gradients together: for kDp the dp x cp groups (Axis::kDpCp, each
// dp member followed by its cp peers: cp replicates the weights), for kExpertDp the
// expert-data-parallel groups, which span dp x cp / ep already. Without cp, groups(axis).
std::vector<std::vector<int>> gradient_groups(const Layout& layout, Axis axis);

// How fast each link class moves bytes, to weigh one class against another when
// comparing mappings. Bytes per second per GPU.
struct LinkSpeeds {
  double intra_node = 300e9;     // NVLink / NVSwitch. Default: 300e9
  double inter_node = 25e9;      // one 200 Gb/s NIC per GPU. Default: 25e9
  double inter_switch = 12.5e9;  // leaf uplinks, 2:1 oversubscribed. Default: 12.5e9
};

// Seconds of link time: each class's bytes over its speed, summed. A proxy for how long a
// step spends communicating; what mappings are compared by.
double link_seconds(const LinkBytes& b, const LinkSpeeds& speeds = {});

// `a` costs no more link time than `b` (relative tolerance 1e-9 for rounding).
bool no_worse(const LinkBytes& a, const LinkBytes& b, const LinkSpeeds& speeds = {});
// `a` costs strictly less link time than `b`.
bool strictly_better(const LinkBytes& a, const LinkBytes& b, const LinkSpeeds& speeds = {});

}  // namespace partrain
