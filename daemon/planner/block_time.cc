// One block's micro-batch on one rank (see block_time.h for the terms).
#include "planner/block_time.h"

#include <algorithm>
#include <cmath>

#include "planner/gemm.h"

namespace partrain::planner {
namespace {

using engine::Recompute;

// Seconds for elementwise kernels that move `bytes` in `kernels` launches.
double stream_seconds(double bytes, double kernels, const HardwareProfile& hw) {
  return bytes / (hw.memory_bandwidth * hw.elementwise_efficiency) + kernels * hw.kernel_overhead;
}

struct Attention {
  double forward = 0, backward = 0, recompute = 0;
};

Attention attention_core(const ModelDims& m, const PlanLayout& l, const Runtime& rt,
                         const Precision& p, const HardwareProfile& hw) {
  const double heads = m.H / l.tp, hd = m.head_dim(), b = l.micro_batch;
  const double queries = m.T / l.cp;  // the rank's two chunks of every sequence
  Attention a;
  if (rt.attention != AttentionKernel::kMaterialized) {
    // Causal: the rank's query chunks (i and 2cp-1-i) see T/2 keys on average. The kernel
    // runs forward and backward (2.5 x the forward's FLOPs) at the fused rate of gemm.h
    // for the keys one call sweeps; the pair's time splits as the FlashAttention-2 paper's
    // rates do (backward 2.5x the FLOPs at about 0.85x the forward's rate, kBackwardRatio).
    // Selective recompute runs
    // the forward again (Megatron's core-attention recompute); no T x T tensor is stored.
    constexpr double kBackwardRatio = 2.5 / 0.85;  // backward time / forward time
    const double flops = 4 * b * heads * hd * queries * (m.T / 2);
    // The keys one call sweeps: every rank's under the all-gather plugin, a chunk's per
    // step of the ring.
    const double keys = l.cp_impl == "allgather" ? m.T : m.T / l.cp;
    const double rate = rt.attention_relative_rate *
                        fused_attention_rate(hw, rt.attention == AttentionKernel::kFusedFa2, keys, hd);
    const double pair = 3.5 * flops / rate;  // forward + backward at the pair's rate
    a.forward = pair / (1 + kBackwardRatio) + hw.kernel_overhead;
    a.backward = pair * kBackwardRatio / (1 + kBackwardRatio) + 2 * hw.kernel_overhead;
    if (m.recompute == Recompute::kSelective) a.recompute = a.forward;
    return a;
  }
  const double batch = b * heads, e = p.act_bytes;
  const double scores = batch * queries * m.T;
  const double drop = rt.attention_dropout ? 2.5 : 0;
  const GemmShape qk{queries, m.T, hd, batch}, pv{queries, hd, m.T, batch}, kv_grad{m.T, hd, queries, batch};
  // The GEMMs write the scores and read the probabilities (their memory-bound time counts
  // those passes); the softmax reads and writes them once forward, and reads P and dP and
  // writes dS backward.
  a.forward = gemm_seconds(qk, hw, e) + gemm_seconds(pv, hw, e) +
              stream_seconds(scores * e * (2 + drop), 1 + (drop > 0 ? 1 : 0), hw);
  a.backward = gemm_seconds(qk, hw, e) + gemm_seconds(pv, hw, e) + 2 * gemm_seconds(kv_grad, hw, e) +
               stream_seconds(scores * e * (3 + drop), 1 + (drop > 0 ? 1 : 0), hw);
  if (m.recompute == Recompute::kSelective) a.recompute = a.forward;
  return a;
}

// Exposed seconds of collectives each paired with the GEMM it can hide behind.
double exposed(const double (&comm)[4], const double (&gemm)[4], bool overlap, double tp) {
  double sum = 0;
  for (int i = 0; i < 4; ++i) sum += overlap ? std::max(0.0, comm[i] - gemm[i]) + comm[i] / tp : comm[i];
  return sum;
}

// Tensor parallel per micro-batch: the whole micro-batch's activations (`bytes`) gathered
// before qkv and fc1 and reduced after proj and fc2, forward and backward (all-reduces
// without sp, of which only backward's can hide); with `forward_only`, the forward again
// (full recompute).
double tensor_parallel(double bytes, const GemmTimes (&g)[4], const PlanLayout& l, const Runtime& rt,
                       const Spans& spans, const HardwareProfile& hw, bool forward_only = false) {
  const double tp = l.tp;
  double fwd = 0, bwd = 0;
  if (l.sp) {
    const double ag = collective_seconds(Collective::kAllGather, bytes, spans.tp, hw);
    const double rs = collective_seconds(Collective::kReduceScatter, bytes, spans.tp, hw);
    const double comm[4] = {ag, rs, ag, rs};
    const double gf[4] = {g[0].forward, g[1].forward, g[2].forward, g[3].forward};
    const double gb[4] = {g[0].backward / 2, g[1].backward / 2, g[2].backward / 2, g[3].backward / 2};
    fwd = exposed(comm, gf, rt.tp_overlap, tp);
    bwd = exposed(comm, gb, rt.tp_overlap || rt.tp_backward_overlap, tp);
  } else {
    const double ar = collective_seconds(Collective::kAllReduce, bytes, spans.tp, hw);
    const double comm[4] = {ar, ar, 0, 0};
    const double gb[4] = {g[0].backward / 2, g[2].backward / 2, 0, 0};
    fwd = 2 * ar;
    bwd = exposed(comm, gb, rt.tp_backward_overlap, tp);
  }
  return forward_only ? fwd : fwd + bwd;
}

// Context parallel per micro-batch: the K/V exchange of the chosen plugin, what the
// attention does not hide (and the forward again under full recompute).
double context_parallel(const ModelDims& m, const PlanLayout& l, const Attention& att, const Spans& spans,
                        const Precision& p, const HardwareProfile& hw) {
  const double kv = 2 * l.micro_batch * (m.T / l.cp) * std::max(m.KV / l.tp, 1.0) * m.head_dim() * p.act_bytes;
  double fwd = 0, bwd = 0;
  if (l.cp_impl == "allgather") {
    fwd = collective_seconds(Collective::kAllGather, kv * l.cp, spans.cp, hw);
    bwd = collective_seconds(Collective::kReduceScatter, kv * l.cp, spans.cp, hw);
  } else {
    const bool other_node = spans.cp.nodes > 1;
    const double pass = send_seconds(kv, other_node, spans.cp.across_switches, hw);
    const double pass_back = send_seconds(2 * kv, other_node, spans.cp.across_switches, hw);
    fwd = (l.cp - 1) * std::max(0.0, pass - att.forward / l.cp);
    bwd = (l.cp - 1) * std::max(0.0, pass_back - att.backward / l.cp);
  }
  return fwd + bwd + (m.recompute == Recompute::kFull ? fwd : 0);
}

}  // namespace

BlockCost block_cost(const ModelDims& m, const PlanLayout& l, bool moe, const Runtime& rt,
                     const Spans& spans, const Precision& p, const HardwareProfile& hw) {
  const double tp = l.tp, e = p.act_bytes, C = m.C, hd = m.head_dim();
  const double n = static_cast<double>(l.micro_batch) * m.T / l.cp;
  const double s = l.sp ? 1 / tp : 1;
  const bool full = m.recompute == Recompute::kFull;
  BlockCost c;

  // GEMMs: attention projections, then the MLP or the experts.
  const GemmTimes qkv = linear_seconds(n, m.qkv() / tp, C, hw, e);
  const GemmTimes proj = linear_seconds(n, C, m.H * hd / tp, hw, e);
  GemmTimes fc1, fc2, router;
  double mlp_tokens = n;
  if (moe) {
    const double per_expert = std::min(n * l.ep, m.capacity_factor * n * m.top_k * l.ep / m.E);
    const double local = m.E / l.ep;
    const GemmTimes a = linear_seconds(per_expert, m.fc() / tp, C, hw, e);
    const GemmTimes b = linear_seconds(per_expert, C, m.F / tp, hw, e);
    fc1 = {local * a.forward, local * a.backward};
    fc2 = {local * b.forward, local * b.backward};
    router = linear_seconds(n, m.E, C, hw, e);
    mlp_tokens = per_expert * local;
  } else {
    fc1 = linear_seconds(n, m.fc() / tp, C, hw, e);
    fc2 = linear_seconds(n, C, m.F / tp, hw, e);
  }
  const Attention att = attention_core(m, l, rt, p, hw);

  // Elementwise kernels: norms, residual adds, activation, RoPE.
  const double act = (m.gpt2 ? 2 * m.F : 3 * m.F) / tp;
  const double rope = m.gpt2 ? 0 : 2 * (m.H + m.KV) * hd / tp;
  const double ew_bytes = e * (n * ((4 * C + 6 * C) * s + rope) + mlp_tokens * act);
  const double ew_forward = stream_seconds(ew_bytes, 8, hw);
  const double ew_backward = stream_seconds(2 * ew_bytes, 12, hw);

  const double gemm_forward = qkv.forward + proj.forward + fc1.forward + fc2.forward + router.forward;
  c.forward = gemm_forward + att.forward + ew_forward;
  c.backward = qkv.backward + proj.backward + fc1.backward + fc2.backward + router.backward +
               att.backward + ew_backward;
  c.recompute = full ? c.forward : att.recompute;

  if (l.tp > 1) {
    const GemmTimes g[4] = {qkv, proj, fc1, fc2};
    c.tp = tensor_parallel(n * C * e, g, l, rt, spans, hw);
    if (full) c.tp += tensor_parallel(n * C * e, g, l, rt, spans, hw, true);
  }
  if (l.cp > 1) c.cp = context_parallel(m, l, att, spans, p, hw);
  // Expert parallel: dispatch and combine, forward and backward.
  if (moe && l.ep > 1) {
    const double a2a = collective_seconds(Collective::kAllToAll, m.top_k * n * C * e / tp, spans.ep, hw);
    c.ep = 4 * a2a + (full ? 2 * a2a : 0);
  }
  return c;
}

double head_seconds(const ModelDims& m, const PlanLayout& l, const Runtime& rt, const Precision& p,
                    const HardwareProfile& hw) {
  const double n = static_cast<double>(l.micro_batch) * m.T / l.cp, e = p.act_bytes;
  const double rows = std::ceil(m.V / l.tp), s = l.sp ? 1.0 / l.tp : 1.0;
  const GemmTimes g = linear_seconds(n, rows, m.C, hw, e);
  // Logits in and their gradient out; unfused, six fp32 read+write passes between.
  const double loss = n * rows * (2 * e + (rt.fused_cross_entropy ? 0 : 6 * 8));
  const double norm = 3 * n * m.C * e * s;        // final norm forward and backward
  return g.forward + g.backward + stream_seconds(loss + norm, 10, hw);
}

double embedding_seconds(const ModelDims& m, const PlanLayout& l, const Precision& p,
                         const HardwareProfile& hw) {
  const double n = static_cast<double>(l.micro_batch) * m.T / l.cp;
  return stream_seconds(n * m.C * (2 * p.act_bytes + 8), 2, hw);
}

}  // namespace partrain::planner
