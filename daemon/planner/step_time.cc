// The step-time model (see step_time.h; formulas in partrain-plan(1)).
#include "planner/step_time.h"

#include <algorithm>
#include <cmath>

namespace partrain::planner {
namespace {

using engine::Recompute;

// Seconds for one rank to send `per_rank` bytes over the slowest link class its axis
// uses (a ring moves at the pace of its slowest edge), plus `messages` latencies.
double link_time(const LinkBytes& b, double per_rank, double messages, const HardwareProfile& hw) {
  if (b.total() <= 0) return 0;
  double bw = hw.intra_bandwidth, lat = hw.intra_latency;
  if (b[LinkClass::kInterSwitch] > 0) {
    bw = hw.inter_switch_bandwidth, lat = hw.inter_latency;
  } else if (b[LinkClass::kInterNode] > 0) {
    bw = hw.inter_bandwidth, lat = hw.inter_latency;
  }
  return per_rank / bw + messages * lat;
}

}  // namespace

Flops flops_per_token(const ModelDims& m, const ParamCounts& p) {
  Flops f;
  const double attention = 4 * m.T * m.C * m.L;  // Q K^T and A V, 2 T C each per layer
  f.forward_per_token = 2 * p.active_matmul + attention;
  f.model_per_token = 3 * f.forward_per_token;  // backward = 2 x forward
  double again = 0;                              // what recompute runs a second time
  if (m.recompute == Recompute::kFull) again = f.forward_per_token - 2 * m.V * m.C;
  if (m.recompute == Recompute::kSelective) again = attention;
  f.hardware_per_token = f.model_per_token + again;
  f.attention_per_token = 3 * attention + (m.recompute == Recompute::kNone ? 0 : attention);
  return f;
}

StepTime predict_step(const StepInputs& in, const HardwareProfile& hw) {
  const PlanLayout& l = in.layout;
  const ModelDims& m = in.model;
  const double W = l.world(), tp = l.tp, pp = l.pp, mcount = l.grad_accum;
  const double rate = hw.peak() * hw.matmul_efficiency;
  const double attention_rate = hw.peak() * hw.attention_efficiency;
  const double bandwidth = hw.memory_bandwidth;
  const Flops f = flops_per_token(m, in.params);
  StepTime t;

  // One micro-batch on the slowest stage (the last: it also runs the LM head); GEMMs at
  // the matmul rate, the attention core at the attention kernel's.
  const double tokens_mb = static_cast<double>(l.micro_batch) * m.T / (tp * l.cp);
  const double head = 2 * m.V * m.C;
  const double gemm = f.hardware_per_token - f.attention_per_token;
  const double gemm_mb = tokens_mb * ((gemm - 3 * head) / pp + 3 * head);
  const double attention_mb = tokens_mb * f.attention_per_token / pp;
  // Elementwise work streams the activations (written forward, read backward, their
  // gradient written and read; recompute writes them again) and reads the weights three
  // times (forward, dX, dW).
  const double again = f.hardware_per_token / f.model_per_token;
  const double traffic_mb = (4 + 3 * (again - 1)) * in.act_bytes_per_micro_batch +
                            3 * in.memory.params * in.precision.param_bytes;
  const double t_mb = gemm_mb / rate + attention_mb / attention_rate + traffic_mb / bandwidth;
  t.compute = mcount * t_mb;

  // Communication per axis; cost_model.h gives whole-cluster bytes per link class, and
  // every rank of a ring sends the same share.
  const int Ls = static_cast<int>(m.L) / l.pp;
  auto ring_steps = [](double n) { return 2 * (n - 1); };
  t.tp = link_time(in.traffic.tp, in.traffic.tp.total() / W,
                   4.0 * Ls * mcount * ring_steps(tp), hw);
  const double moe_s = m.moe_layers / pp;
  t.ep = link_time(in.traffic.ep, in.traffic.ep.total() / W, 4.0 * moe_s * mcount * (l.ep - 1), hw);
  t.cp = link_time(in.traffic.cp, in.traffic.cp.total() / W, 3.0 * Ls * mcount * (l.cp - 1), hw);
  // PP: a middle stage sends per edge what the whole group's (p-1) edges carry / (p-1).
  const double pp_edges = W / pp * (pp - 1);
  t.pp = l.pp > 1 ? link_time(in.traffic.pp, in.traffic.pp.total() / pp_edges,
                              2.0 * mcount * l.virtual_stages, hw)
                  : 0;
  // DP: the gradients once per step, in 25 MiB buckets, overlapped with the last
  // micro-batch's backward except for the last bucket (about one block's gradients).
  const double grad_bytes = in.memory.params * in.precision.grad_bytes;
  const double buckets = std::max(1.0, std::ceil(grad_bytes / (25.0 * (1 << 20))));
  t.dp = link_time(in.grad_traffic.dp, in.grad_traffic.dp.total() / W,
                   buckets * ring_steps(l.dp), hw);
  const double backward_last = t_mb * (f.hardware_per_token - f.forward_per_token) /
                               f.hardware_per_token;
  t.dp_exposed = l.dp > 1 ? std::max(t.dp - backward_last, t.dp / std::max(1, Ls + 1)) : 0;

  // The pipelined part; the bubble adds (p-1)/(v m) of it.
  const double busy = t.compute + t.tp + t.cp + t.ep + t.pp;
  const double bubble = bubble_fraction(l.pp, l.grad_accum, l.virtual_stages);
  t.bubble = bubble < 1 ? busy * bubble / (1 - bubble) : 0;
  // AdamW reads weight, gradient, moments (and master) and writes all but the gradient.
  const Precision& p = in.precision;
  const double state_params = in.memory.params / (l.zero >= 1 ? l.dp : 1);
  const double touched = 2.0 * p.param_bytes + p.grad_bytes + 2.0 * p.optimizer_bytes();
  t.optimizer = state_params * touched / bandwidth;
  t.total = busy + t.bubble + t.dp_exposed + t.optimizer;

  const double tokens = static_cast<double>(l.micro_batch) * l.grad_accum * l.dp * m.T;
  t.tokens_per_s = tokens / t.total;
  t.tokens_per_s_per_gpu = t.tokens_per_s / W;
  t.model_flops_per_gpu = f.model_per_token * t.tokens_per_s_per_gpu;
  t.hardware_flops_per_gpu = f.hardware_per_token * t.tokens_per_s_per_gpu;
  t.mfu = t.model_flops_per_gpu / hw.peak();
  return t;
}

}  // namespace partrain::planner
