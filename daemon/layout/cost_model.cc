// Ring-volume cost model (see cost_model.h for the formulas).
#include "layout/cost_model.h"

#include <utility>
#include <vector>

namespace partrain {
namespace {

class Counter {
 public:
  Counter(const SlurmView& view, const Mapping& mapping) : view_(view), mapping_(mapping) {}

  // `bytes` over the link between ranks a and b.
  void edge(int a, int b, double bytes, LinkBytes* out) const {
    (*out)[view_.link(mapping_.slot_of_rank[a].node, mapping_.slot_of_rank[b].node)] += bytes;
  }
  // `bytes` along every edge of the ring through `group` in member order.
  void ring(const std::vector<int>& group, double bytes, LinkBytes* out) const {
    const size_t n = group.size();
    if (n < 2) return;
    for (size_t i = 0; i < n; ++i) edge(group[i], group[(i + 1) % n], bytes, out);
  }

 private:
  const SlurmView& view_;
  const Mapping& mapping_;
};

// What one all-reduce of `size` bytes sends along each ring edge of an n-member group.
double all_reduce_edge(double size, size_t n, double factor = 2.0) {
  return n < 2 ? 0.0 : factor * static_cast<double>(n - 1) / static_cast<double>(n) * size;
}

}  // namespace

// The layout has both: dense gradients reduce over the dp x cp group (Axis::kDpCp, each dp
// member followed by its cp peers), and the expert grid's expert-dp group already folds cp
// in (layout.h).
std::vector<std::vector<int>> gradient_groups(const Layout& layout, Axis axis) {
  return layout.groups(axis == Axis::kDp ? Axis::kDpCp : axis);
}

LinkBytes& LinkBytes::operator+=(const LinkBytes& o) {
  for (int c = 0; c < kNumLinkClasses; ++c) bytes[c] += o.bytes[c];
  return *this;
}

StepCost step_cost(const Layout& layout, const SlurmView& view, const Mapping& mapping,
                   const StepSizes& sizes) {
  const Counter count(view, mapping);
  const double tp = layout.tp();
  const double pp = layout.pp();
  const double m = sizes.grad_accum;
  const double bpe = sizes.bytes_per_element;
  const double activations = static_cast<double>(sizes.micro_batch) * sizes.seq_len /
                             layout.cp() * sizes.hidden * bpe;
  const double kv_hidden = sizes.kv_hidden > 0 ? sizes.kv_hidden : sizes.hidden;
  const double stage_layers = sizes.layers / pp;
  StepCost cost;

  for (const std::vector<int>& g : layout.groups(Axis::kTp)) {
    count.ring(g, 4.0 * stage_layers * m * all_reduce_edge(activations, g.size()), &cost.tp);
  }
  for (const std::vector<int>& g : layout.groups(Axis::kCp)) {
    const double kv_shard = 2.0 * activations * kv_hidden / sizes.hidden / tp;
    const double passes = 3.0 * static_cast<double>(g.size() - 1);
    count.ring(g, stage_layers * m * passes * kv_shard, &cost.cp);
  }
  const double dp_factor = layout.spec().zero == 3 ? 3.0 : 2.0;
  const double dense_grads = sizes.params / (tp * pp) * bpe;
  for (const std::vector<int>& g : gradient_groups(layout, Axis::kDp)) {
    count.ring(g, all_reduce_edge(dense_grads, g.size(), dp_factor), &cost.dp);
  }
  if (sizes.expert_params > 0) {
    const double expert_grads = sizes.expert_params / (tp * pp * layout.ep()) * bpe;
    for (const std::vector<int>& g : gradient_groups(layout, Axis::kExpertDp)) {
      count.ring(g, all_reduce_edge(expert_grads, g.size(), dp_factor), &cost.dp);
    }
  }
  const double v = layout.spec().virtual_stages;
  const double p2p = 2.0 * activations / tp * m;  // forward activation + backward gradient
  for (const std::vector<int>& g : layout.groups(Axis::kPp)) {
    for (size_t i = 0; i + 1 < g.size(); ++i) {
      count.edge(g[i], g[i + 1], v * p2p, &cost.pp);
    }
    if (g.size() > 1 && v > 1) count.edge(g.back(), g.front(), (v - 1) * p2p, &cost.pp);
  }
  const int moe_layers = sizes.moe_layers >= 0 ? sizes.moe_layers
                                               : (layout.ep() > 1 ? sizes.layers : 0);
  for (const std::vector<int>& g : layout.groups(Axis::kEp)) {
    const double n = static_cast<double>(g.size());
    const double per_peer = sizes.top_k * activations / tp / n;
    const double bytes = 4.0 * moe_layers / pp * m * per_peer;
    for (int a : g) {
      for (int b : g) {
        if (a != b) count.edge(a, b, bytes, &cost.ep);
      }
    }
  }
  for (const LinkBytes* part : {&cost.tp, &cost.cp, &cost.dp, &cost.ep, &cost.pp}) {
    cost.total += *part;
  }
  return cost;
}

double link_seconds(const LinkBytes& b, const LinkSpeeds& speeds) {
  return b[LinkClass::kIntraNode] / speeds.intra_node +
         b[LinkClass::kInterNode] / speeds.inter_node +
         b[LinkClass::kInterSwitch] / speeds.inter_switch;
}

namespace {
constexpr double kRelTol = 1e-9;
}  // namespace

bool no_worse(const LinkBytes& a, const LinkBytes& b, const LinkSpeeds& speeds) {
  const double tb = link_seconds(b, speeds);
  return link_seconds(a, speeds) <= tb + kRelTol * tb;
}

bool strictly_better(const LinkBytes& a, const LinkBytes& b, const LinkSpeeds& speeds) {
  const double tb = link_seconds(b, speeds);
  return link_seconds(a, speeds) < tb - kRelTol * tb;
}

}  // namespace partrain
