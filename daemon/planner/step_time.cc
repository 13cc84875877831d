// The step-time model (see step_time.h; formulas in partrain-plan(1)).
#include "planner/step_time.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "planner/collectives.h"

namespace partrain::planner {
namespace {

using engine::Recompute;

// Block boundaries of the p v stages: the plan's partition when the runtime balances by
// cost, else layers / (p v) blocks each (the first stages take a remainder).
std::vector<int> stage_bounds(const ModelDims& m, const PlanLayout& l, const Runtime& rt, int stages) {
  if (rt.balanced_partition && static_cast<int>(l.stage_bounds.size()) == stages + 1) return l.stage_bounds;
  const int L = static_cast<int>(m.L), per = L / stages, extra = L % stages;
  std::vector<int> b{0};
  for (int s = 0; s < stages; ++s) b.push_back(b.back() + per + (s < extra ? 1 : 0));
  return b;
}

int moe_blocks_in(const ModelDims& m, int b0, int b1) {
  int n = 0;
  for (int i = b0; i < b1 && m.moe_layers > 0; ++i) n += (i + 1) % m.moe_every == 0 ? 1 : 0;
  return n;
}

// One pipeline rank: its micro-batch time by part, what backward and forward of one
// micro-batch take (the windows that hide the gradient reduction and parameter gathers),
// and the parameters whose gradients it reduces.
struct RankTime {
  double compute = 0, tp = 0, cp = 0, ep = 0, pp = 0;
  double forward = 0, backward = 0;
  double dense_params = 0, expert_params = 0;
  int blocks = 0;
  double total() const { return compute + tp + cp + ep + pp; }
};

// Seconds of the gradient reduction over dp x cp (and of ZeRO's parameter gathers) for
// one rank, and the part its compute does not hide (with what the collectives' kernels
// take from the compute they overlap: comm_sm_share of it).
//
// Every bucket is its own collective and pays its latency: DDP and ZeRO-1/2 reduce
// ceil(params / grad_bucket_params) buckets behind the last micro-batch's backward (each
// micro-batch's under reduce_every_micro_batch); ZeRO-1/2 gather the updated weights once
// (behind the next forward with param_gather_overlap). ZeRO-3 gathers each block before
// its forward and again before its backward and reduce-scatters its gradient after it,
// every micro-batch, one block ahead of the compute: block i's collectives hide behind
// block i-1's compute, and what is longer is exposed, plus the first gather.
std::pair<double, double> data_parallel(const RankTime& r, const StepInputs& in, const HardwareProfile& hw) {
  const PlanLayout& l = in.layout;
  const Runtime& rt = in.runtime;
  const Spans& sp = in.spans;
  if (sp.dp.ranks <= 1 && sp.expert_dp.ranks <= 1) return {0, 0};
  const double wire = rt.grad_wire_bytes > 0 ? rt.grad_wire_bytes : in.precision.grad_bytes;
  const double pb = in.precision.param_bytes;
  const double params = r.dense_params + r.expert_params;
  // One collective per bucket of `per` parameters, over the dense and expert groups.
  auto bucketed = [&](Collective c, double bytes_per_param, double per) {
    double t = 0;
    for (const auto& [count, group] : {std::pair{r.dense_params, &sp.dp}, std::pair{r.expert_params, &sp.expert_dp}}) {
      if (count <= 0) continue;
      const double n = std::ceil(count / per);
      t += n * collective_seconds(c, count / n * bytes_per_param, *group, hw);
    }
    return t;
  };
  const double m = l.grad_accum, share = hw.comm_sm_share;
  if (l.zero >= 3) {
    const double blocks = std::max(1, r.blocks), per = std::max(1.0, params / blocks);
    const double ag = bucketed(Collective::kAllGather, pb, per) / blocks;
    const double rs = bucketed(Collective::kReduceScatter, wire, per) / blocks;
    const double fwd = r.forward / blocks, bwd = r.backward / blocks;
    const double rs_times = rt.reduce_every_micro_batch ? m : 1;
    const double all = m * blocks * 2 * ag + rs_times * blocks * rs;
    const double bwd_gather = rt.zero3_backward_prefetch ? std::max(0.0, ag - bwd) : ag;
    const double exposed = m * (blocks * (std::max(0.0, ag - fwd) + bwd_gather) + ag) +
                           rs_times * blocks * std::max(0.0, rs - bwd) +
                           share * (m * blocks * (std::min(ag, fwd) + std::min(ag, bwd)) +
                                    rs_times * blocks * std::min(rs, bwd));
    return {all, exposed};
  }
  // The window the last backward (and the next forward) opens: one micro-batch, or under
  // interleaving the last group of p micro-batches, which sweeps every chunk of the rank
  // (Megatron's interleaved order), so each chunk's buckets go as its last backward ends.
  const double window = l.pp > 1 && l.virtual_stages > 1 ? std::min<double>(l.pp, m) : 1;
  const double backward = window * r.backward, forward = window * r.forward;
  const double per = std::max(1.0, rt.grad_bucket_params);
  const double reduce_once = bucketed(l.zero == 0 ? Collective::kAllReduce : Collective::kReduceScatter, wire, per);
  const double reduce_times = rt.reduce_every_micro_batch ? m : 1;
  const double bucket = per / std::max(per, params);  // the last bucket, reduced after the backward
  double exposed = 0;
  if (rt.dp_overlap) {
    // The last micro-batch's backward hides the buckets reduced before it ends; earlier
    // micro-batches' (reduce_every_micro_batch) hide behind the next one's backward.
    exposed = reduce_times * (std::max(reduce_once - backward, reduce_once * bucket) +
                              share * std::min(reduce_once, backward));
  } else {
    exposed = reduce_times * reduce_once;
  }
  double gather = 0;
  if (l.zero >= 1) {
    gather = bucketed(Collective::kAllGather, pb, per);
    exposed += rt.param_gather_overlap
                   ? std::max(gather - forward, gather * bucket) + share * std::min(gather, forward)
                   : gather;
  }
  return {reduce_times * reduce_once + gather, exposed};
}

// Every pipeline rank's micro-batch time by part; `p2p` receives one pipeline transfer's
// seconds.
std::vector<RankTime> rank_times(const StepInputs& in, const HardwareProfile& hw, double* p2p) {
  const PlanLayout& l = in.layout;
  const ModelDims& m = in.model;
  const ParamCounts& pc = in.params;
  const Runtime& rt = in.runtime;
  const int p = std::max(1, l.pp), v = p > 1 ? std::max(1, l.virtual_stages) : 1, stages = p * v;
  const double tp = l.tp, e = in.precision.act_bytes;
  const BlockCost dense = block_cost(m, l, false, rt, in.spans, in.precision, hw);
  const BlockCost moe = m.moe_layers > 0 ? block_cost(m, l, true, rt, in.spans, in.precision, hw) : BlockCost{};
  const double head = head_seconds(m, l, rt, in.precision, hw);
  const double embed = embedding_seconds(m, l, in.precision, hw);
  const std::vector<int> bounds = stage_bounds(m, l, rt, stages);
  // A pipeline transfer: a stage's output for one micro-batch (1/tp of it per rank when
  // sequence-parallel or scattered).
  *p2p = 0;
  if (p > 1) {
    const double bytes = l.micro_batch * m.T / l.cp * m.C * e / (l.sp || rt.pp_scatter_gather ? tp : 1);
    *p2p = send_seconds(bytes, in.spans.pp.nodes > 1, in.spans.pp.across_switches, hw);
  }
  const double vocab = std::ceil(m.V / tp) * m.C;
  std::vector<RankTime> ranks(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    RankTime& t = ranks[static_cast<size_t>(r)];
    for (int c = 0; c < v; ++c) {
      const int s = c * p + r;
      const int b0 = bounds[static_cast<size_t>(s)], b1 = bounds[static_cast<size_t>(s) + 1];
      const double nm = moe_blocks_in(m, b0, b1), nd = (b1 - b0) - nm;
      t.blocks += b1 - b0;
      t.compute += nd * dense.compute() + nm * moe.compute();
      t.tp += nd * dense.tp + nm * moe.tp;
      t.cp += nd * dense.cp + nm * moe.cp;
      t.ep += nd * dense.ep + nm * moe.ep;
      t.forward += nd * dense.forward + nm * moe.forward;
      t.backward += nd * (dense.backward + dense.recompute) + nm * (moe.backward + moe.recompute);
      t.dense_params += nd * (pc.layer_split / tp + pc.layer_repl) + nm * (pc.moe_layer_split / tp + pc.moe_layer_repl);
      t.expert_params += nm * m.E / l.ep * (pc.expert_split / tp + pc.expert_repl);
      if (s == 0) {
        t.compute += embed;
        t.dense_params += vocab + pc.positions;
      }
      if (s == stages - 1) {
        t.compute += head;
        t.backward += head * 2 / 3;
        t.dense_params += pc.final_norm + ((m.tied && p == 1) ? 0 : vocab);
      }
      if (p > 1 && !rt.pp_overlap) t.pp += 2 * *p2p;  // its input forward, its gradient back
    }
    if (rt.grad_accumulation_pass) {
      t.compute += (t.dense_params + t.expert_params) * (e + 8) /
                   (hw.memory_bandwidth * hw.elementwise_efficiency);
    }
  }
  return ranks;
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
  const int p = std::max(1, l.pp), v = p > 1 ? std::max(1, l.virtual_stages) : 1;
  double p2p = 0;
  const std::vector<RankTime> ranks = rank_times(in, hw, &p2p);
  const Runtime& rt = in.runtime;

  // The pipeline: m micro-batches at the slowest rank's pace, then the fill and drain:
  // (p-1)/v of a rank's micro-batch (a third of it for ZB-H1, whose weight gradients fill
  // the cool-down).
  const RankTime* slow = &ranks.front();
  double mean = 0;
  for (const RankTime& t : ranks) {
    if (t.total() > slow->total()) slow = &t;
    mean += t.total() / p;
  }
  const double mcount = l.grad_accum;
  StepTime st;
  st.compute = mcount * slow->compute;
  st.tp = mcount * slow->tp;
  st.cp = mcount * slow->cp;
  st.ep = mcount * slow->ep;
  st.pp = mcount * slow->pp + (p > 1 && rt.pp_overlap ? 2.0 * (p - 1) * p2p : 0);
  const double busy = mcount * slow->total();
  if (p > 1) st.bubble = mean * (p - 1) / v * (l.sched == "zbh1" ? 1.0 / 3 : 1.0);

  // Gradient reduction: rank r finishes its last backward r/v micro-batch times before
  // the first stage does, and has that long for its collectives.
  const Precision& pr = in.precision;
  for (int r = 0; r < p; ++r) {
    const RankTime& t = ranks[static_cast<size_t>(r)];
    const auto [all, shown] = data_parallel(t, in, hw);
    st.dp = std::max(st.dp, all);
    st.dp_exposed = std::max(st.dp_exposed, shown - mean * r / v);
    // AdamW reads weight, gradient, moments (and master) and writes all but the gradient.
    const double shard = (t.dense_params + t.expert_params) / (l.zero >= 1 ? std::max(1, in.spans.dp.ranks) : 1);
    const double touched = 2.0 * pr.param_bytes + pr.grad_bytes + 2.0 * pr.optimizer_bytes();
    st.optimizer = std::max(st.optimizer, shard * touched / hw.memory_bandwidth);
  }
  st.total = busy + st.bubble + (st.pp - mcount * slow->pp) + st.dp_exposed + st.optimizer;

  const Flops f = flops_per_token(m, in.params);
  const double tokens = static_cast<double>(l.micro_batch) * l.grad_accum * l.dp * m.T;
  st.tokens_per_s = tokens / st.total;
  st.tokens_per_s_per_gpu = st.tokens_per_s / l.world();
  st.model_flops_per_gpu = f.model_per_token * st.tokens_per_s_per_gpu;
  st.hardware_flops_per_gpu = f.hardware_per_token * st.tokens_per_s_per_gpu;
  st.mfu = st.model_flops_per_gpu / hw.peak();
  return st;
}

}  // namespace partrain::planner
