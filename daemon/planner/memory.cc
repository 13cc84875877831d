// Parameter counts and per-rank memory (see memory.h; formulas in partrain-plan(1)).
#include "planner/memory.h"

#include <algorithm>
#include <cmath>

namespace partrain::planner {
namespace {

using engine::Recompute;

constexpr double kI32 = 4, kF32 = 4;  // bytes of token ids and of fp32 statistics
constexpr double kDpBucketBytes = 25.0 * (1 << 20);  // the dp plugin's default bucket_mb

// MoE blocks among layers [first, first + count): those with (layer + 1) % every == 0.
int moe_layers_in(const engine::ModelOptions& o, int first, int count) {
  if (o.moe_experts <= 0 || o.moe_every <= 0) return 0;
  int n = 0;
  for (int l = first; l < first + count; ++l) n += (l + 1) % o.moe_every == 0 ? 1 : 0;
  return n;
}

// Capacity slots of one expert: min(N, ceil(cf * N * k / E)), as the router allocates.
double expert_capacity(const ModelDims& m, double N) {
  return std::min(N, std::ceil(m.capacity_factor * (N * m.top_k) / m.E));
}

}  // namespace

ModelDims model_dims(const engine::ModelOptions& o) {
  ModelDims m;
  m.gpt2 = o.arch == engine::Arch::kGpt2;
  m.V = o.vocab_size;
  m.T = o.seq_len;
  m.C = o.hidden;
  m.L = o.layers;
  m.H = o.heads;
  m.KV = o.kv_heads > 0 ? o.kv_heads : o.heads;
  // The engine's defaults: 4C for GPT-2, LLaMA's 8C/3 rounded up to a multiple of 64.
  m.F = o.ffn_hidden > 0 ? o.ffn_hidden
                         : (m.gpt2 ? 4.0 * o.hidden : (8 * o.hidden / 3 + 63) / 64 * 64);
  m.E = o.moe_experts;
  m.top_k = o.moe_top_k;
  m.capacity_factor = o.moe_capacity_factor;
  m.moe_layers = moe_layers_in(o, 0, o.layers);
  m.moe_every = o.moe_every;
  m.tied = o.tie_embeddings;
  m.recompute = o.recompute;
  return m;
}

ParamCounts count_params(const ModelDims& m) {
  ParamCounts p;
  const double C = m.C, F = m.F, q = m.H * m.head_dim(), kv = m.KV * m.head_dim();
  p.embed = m.V * C;
  p.head = m.tied ? 0 : m.V * C;
  double attn_split = 0, attn_repl = 0, mlp_split = 0, mlp_repl = 0;
  if (m.gpt2) {
    p.positions = m.T * C;
    p.final_norm = 2 * C;
    attn_split = 3 * C * C + 3 * C + C * C;  // c_attn weight and (column) bias, c_proj weight
    attn_repl = 4 * C + C;                    // two LayerNorms, c_proj (row) bias
    mlp_split = F * C + F + C * F;            // c_fc weight and bias, c_proj weight
    mlp_repl = C;                             // c_proj bias
  } else {
    p.final_norm = C;
    attn_split = q * C + 2 * kv * C + C * q;  // q, k, v, o projections
    attn_repl = 2 * C;                        // two RMSNorms
    mlp_split = 3 * F * C;                    // gate, up, down
  }
  p.layer_split = attn_split + mlp_split;
  p.layer_repl = attn_repl + mlp_repl;
  p.moe_layer_split = attn_split;
  p.moe_layer_repl = attn_repl + m.E * C;  // + the router
  p.expert_split = mlp_split;
  p.expert_repl = mlp_repl;
  const double dense_layers = m.L - m.moe_layers;
  p.total = p.embed + p.positions + p.head + p.final_norm +
            dense_layers * (p.layer_split + p.layer_repl) +
            m.moe_layers * (p.moe_layer_split + p.moe_layer_repl +
                            m.E * (p.expert_split + p.expert_repl));
  // Matmul weights per token: attention and MLP (top_k experts and the router on MoE
  // blocks) and the LM head (tied or not, it is one V x C GEMM).
  const double attn_mm = m.gpt2 ? 4 * C * C : 2 * q * C + 2 * kv * C;
  const double mlp_mm = m.gpt2 ? 2 * F * C : 3 * F * C;
  p.active_matmul = m.L * attn_mm + dense_layers * mlp_mm +
                    m.moe_layers * (m.E * C + m.top_k * mlp_mm) + m.V * C;
  return p;
}

double in_flight_micro_batches(const PlanLayout& l, int stage) {
  if (l.pp <= 1) return 1;
  const int m = l.grad_accum, p = l.pp, v = l.virtual_stages, r = stage;
  if (l.sched == "gpipe") return m;  // every forward before the first backward
  // ZB-H1 frees an input's activations only at its weight gradient, which it delays by
  // r micro-batches: p in flight on every rank (at most m).
  if (l.sched == "zbh1") return std::min(p, m);
  if (l.sched == "interleaved" && v > 1) {
    // Rank r runs (p-r-1)*2 + (v-1)*p warm-up forwards of 1/v of its layers each (all m*v
    // when m == p), then one more before its first backward.
    const int chunks = m == p ? m * v : std::min((p - r - 1) * 2 + (v - 1) * p + 1, m * v);
    return static_cast<double>(chunks) / v;
  }
  return std::min(p - r, m);  // 1F1B (and schedules the planner does not know)
}

double bubble_fraction(int pp, int micro_batches, int virtual_stages) {
  if (pp <= 1 || micro_batches < 1) return 0;
  const double p = pp, m = micro_batches;
  return (p - 1) / (m + p - 1) / std::max(1, virtual_stages);
}

MemoryBreakdown stage_memory(const ModelDims& m, const PlanLayout& l, const Precision& prec,
                             double fragmentation, double reserved, int stage) {
  const ParamCounts pc = count_params(m);
  const double tp = l.tp, ep = l.ep, dp = l.dp, edp = std::max(1, l.dp / l.ep);
  const double pb = prec.param_bytes, gb = prec.grad_bytes, ab = prec.act_bytes;
  const bool first = stage == 0, last = stage == l.pp - 1;
  const int Ls = static_cast<int>(m.L) / l.pp;
  // MoE blocks on this rank (every block is MoE when moe_layers == L, none when 0): its
  // chunks are pipeline stages c*pp + stage, each L/(pp v) consecutive blocks.
  int moe_s = 0;
  if (m.moe_layers > 0) {
    const int v = std::max(1, l.virtual_stages), Lc = Ls / v;
    for (int c = 0; c < v; ++c) {
      const int s0 = (c * l.pp + stage) * Lc;
      for (int i = s0; i < s0 + Lc; ++i) moe_s += (i + 1) % m.moe_every == 0 ? 1 : 0;
    }
  }
  const double dense_s = Ls - moe_s, experts = m.E / ep;
  // Vocabulary rows of the embedding, head and logits on tp rank 0, the rank that holds
  // most: ceil(V / tp) (params.h vocab_rows; the last rank holds fewer).
  const double Vr = std::ceil(m.V / tp), vocab = Vr * m.C;

  MemoryBreakdown mb;
  mb.stage = stage;
  // Parameters: the tp-split part over tp, experts over ep; embeddings on the first
  // stage, final norm and head on the last (a tied head keeps a copy of the embedding there).
  double dense = dense_s * (pc.layer_split / tp + pc.layer_repl) +
                 moe_s * (pc.moe_layer_split / tp + pc.moe_layer_repl);
  const double expert = moe_s * experts * (pc.expert_split / tp + pc.expert_repl);
  if (first) dense += vocab + pc.positions;
  if (last) dense += pc.final_norm + (m.tied ? (l.pp > 1 ? vocab : 0) : vocab);
  mb.params = dense + expert;
  // ZeRO as the engine stores it (engine/model/sharding.h): stage 1 shards the optimizer
  // state and reduces the gradient into an fp32 shard next to the full buffer; stage 2
  // keeps no full gradient, only the shard plus two recycled block slots and the
  // embedding and tail (final norm, untied head) slots; stage 3 does the same for the
  // weights with prefetch + 1 block slots ([plugins.zero3] prefetch, default 1). Dense
  // parameters shard over dp, expert parameters over the expert-data-parallel group.
  auto sharded = [&](double bytes_per_param) {
    return dense * bytes_per_param / dp + expert * bytes_per_param / edp;
  };
  const double dense_block = pc.layer_split / tp + pc.layer_repl;
  const double moe_block =
      pc.moe_layer_split / tp + pc.moe_layer_repl + experts * (pc.expert_split / tp + pc.expert_repl);
  const double block = std::max(dense_s > 0 ? dense_block : 0.0, moe_s > 0 ? moe_block : 0.0);
  const double ends = (first ? vocab + pc.positions : 0) +
                      (last ? pc.final_norm + (m.tied ? 0 : vocab) : 0);
  constexpr int kZero3Prefetch = 1;
  mb.weights = l.zero >= 3 ? sharded(pb) + ((kZero3Prefetch + 1) * block + ends) * pb : mb.params * pb;
  mb.grads = l.zero >= 2   ? sharded(kF32) + (2 * block + ends) * gb
             : l.zero == 1 ? mb.params * gb + sharded(kF32)
                           : mb.params * gb;
  mb.optimizer = l.zero >= 1 ? sharded(prec.optimizer_bytes()) : mb.params * prec.optimizer_bytes();

  // Activations of one micro-batch (N tokens) as the engine allocates them; tensors of
  // the whole sequence split over tp only under sequence parallelism (seq), tensors inside
  // attention and the MLP always (split).
  // Context parallelism splits every sequence over cp ranks.
  const double N = static_cast<double>(l.micro_batch) * m.T / l.cp, C = m.C;
  const double seq = l.sp ? 1 / tp : 1, split = 1 / tp;
  const double core = (N * C * ab + N * m.H * kF32) * split;  // att, lse (b H T fp32)
  const double rest = (3 * N * C * ab + 4 * N * kF32) * seq +                   // ln1 res2 ln2
                      N * (m.qkv() + m.fc() + m.F) * ab * split;                 // qkv fc act
  const double cap = m.E > 0 ? expert_capacity(m, N) : 0, S = m.E * cap;
  const double moe_acts = N * m.E * ab * seq + S * (kI32 + kF32) + S * 2 * C * ab +
                          S * (m.fc() + m.F) * ab * split;
  const bool none = m.recompute == Recompute::kNone, full = m.recompute == Recompute::kFull;
  double kept = (Ls + 1) * N * C * ab * seq;  // block inputs res_[0..Ls]
  if (none) kept += Ls * core;
  if (!full) kept += Ls * rest;
  kept += moe_s * moe_acts;
  double once = 2 * N * kI32;  // tokens, targets
  if (!none) once += core;     // the attention core, shared by all blocks
  if (full) once += rest;      // one block's worth, rebuilt in backward
  if (last) once += (N * C * ab + 2 * N * kF32) * seq + N * Vr * ab + 2 * N * kF32;
  // Tensor parallel's vocabulary-parallel lookup and loss: six token-index and two fp32
  // per-token buffers (engine/model/vocab_parallel.cc tp_allocate).
  if (l.tp > 1) once += 8 * N * kI32;
  mb.in_flight = in_flight_micro_batches(l, stage);
  mb.activations = kept * mb.in_flight + once;
  // Backward scratch, shared by all blocks (MoE keeps its own per block). The branch
  // output and dln are whole sequences even under sp (a row-parallel output before its
  // reduce-scatter, a column-parallel input's gradient); dres, dbranch and recompute's
  // res scratch are the rank's rows.
  double ws = N * C * ab + (full ? N * C * ab * seq : 0);             // branch, res scratch
  ws += 2 * N * C * ab * seq + N * C * ab + N * C * ab * split;       // dres dbranch, dln, datt
  ws += N * (m.qkv() + m.fc() + m.F) * ab * split;                    // dqkv dfc dact
  if (last) ws += N * kF32 + N * Vr * ab;                             // dloss, dlogits
  // Sequence parallel: the all-gathered input, the partial output, their whole-sequence
  // gradient, the rank's rows of it and a norm's gradient scratch (tp_allocate).
  if (l.tp > 1 && l.sp) ws += 3 * N * C * ab + N * C * ab * seq + 2 * C * gb;
  ws += moe_s * (S * kF32 + N * m.E * ab * seq + cap * 2 * C * ab + cap * (m.fc() + m.F) * ab * split);
  mb.workspace = ws;

  // Communication buffers (not in the engine's accounting: they live in the strategies).
  double buffers = 0;
  if (l.dp > 1 && l.zero < 3) buffers += 2 * std::min(kDpBucketBytes, (dense + expert) * 4);
  // (ZeRO-3's gathered and prefetched blocks are the weight slots above.)
  if (l.pp > 1) buffers += 2 * 2 * N * C * ab * seq;  // send and receive, activation and gradient
  // (Sequence parallel's all-gathered sequence is in the workspace above.)
  if (l.ep > 1 && moe_s > 0) buffers += 2 * S * C * ab;  // dispatch and combine
  mb.comm_buffers = buffers;
  mb.margin = fragmentation * (mb.engine_total() + buffers);
  mb.reserved = reserved;
  return mb;
}

std::vector<MemoryBreakdown> all_stage_memory(const ModelDims& m, const PlanLayout& l,
                                              const Precision& p, double fragmentation,
                                              double reserved) {
  std::vector<MemoryBreakdown> out;
  for (int s = 0; s < std::max(1, l.pp); ++s) out.push_back(stage_memory(m, l, p, fragmentation, reserved, s));
  return out;
}

MemoryBreakdown peak_memory(const ModelDims& m, const PlanLayout& l, const Precision& p,
                            double fragmentation, double reserved) {
  const std::vector<MemoryBreakdown> stages = all_stage_memory(m, l, p, fragmentation, reserved);
  MemoryBreakdown best = stages.front();
  for (const MemoryBreakdown& b : stages) {
    if (b.total() > best.total()) best = b;
  }
  return best;
}

}  // namespace partrain::planner
