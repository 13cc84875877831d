// Parameter counts and per-rank memory (see memory.h; formulas in partrain-plan(1)).
#include "planner/memory.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "engine/model/block_records.h"

namespace partrain::planner {
namespace {

using engine::Recompute;

constexpr double kI32 = 4, kF32 = 4;  // bytes of token ids and of fp32 statistics
constexpr double kDpBucketBytes = 25.0 * (1 << 20);  // the dp plugin's default bucket_mb

// MoE blocks among layers [first, first + count).
int moe_layers_in(const engine::ModelOptions& o, int first, int count) {
  int n = 0;
  for (int l = first; l < first + count; ++l) n += engine::is_moe_layer(o, l) ? 1 : 0;
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

std::vector<double> chunk_slots(const PlanLayout& l, int stage) {
  if (l.pp <= 1) return {1};
  const int m = l.grad_accum, p = l.pp, v = std::max(1, l.virtual_stages), r = stage;
  if (l.sched == "gpipe") return {static_cast<double>(m)};  // every forward before any backward
  // ZB-H1 frees an input's activations only at its weight gradient, which rank r delays by
  // r micro-batches: p in flight on every rank (at most m).
  if (l.sched == "zbh1") return {static_cast<double>(std::min(p, m))};
  if (l.sched == "interleaved" && v > 1) {
    // The interleaved order (plugins/pipeline/interleaved): forward k runs chunk
    // (k mod pv) / p, backward k chunk v - 1 - (k mod pv) / p; rank r runs
    // 2(p - r - 1) + (v - 1)p warm-up forwards (all m v when m == p), then one forward and
    // one backward at a time. Each chunk keeps its own most micro-batches at once.
    const int total = m * v, warmup = m == p ? total : std::min(2 * (p - r - 1) + (v - 1) * p, total);
    std::vector<int> now(static_cast<size_t>(v), 0), peak(static_cast<size_t>(v), 0);
    auto fwd = [&](int k) {
      const size_t c = static_cast<size_t>((k % (p * v)) / p);
      peak[c] = std::max(peak[c], ++now[c]);
    };
    auto bwd = [&](int k) { --now[static_cast<size_t>(v - 1 - (k % (p * v)) / p)]; };
    for (int k = 0; k < warmup; ++k) fwd(k);
    for (int k = 0; k < total - warmup; ++k) {
      fwd(warmup + k);
      bwd(k);
    }
    return std::vector<double>(peak.begin(), peak.end());
  }
  return {static_cast<double>(std::min(p - r, m))};  // 1F1B (and schedules the planner does not know)
}

double rank_peak_in_flight(const PlanLayout& l, int stage) {
  const int m = l.grad_accum, p = l.pp, v = std::max(1, l.virtual_stages), r = stage;
  if (l.pp <= 1 || l.sched != "interleaved" || v <= 1) return in_flight_micro_batches(l, stage);
  // The interleaved order of chunk_slots, counting every chunk's micro-batches together.
  const int total = m * v, warmup = m == p ? total : std::min(2 * (p - r - 1) + (v - 1) * p, total);
  int now = 0, peak = 0;
  for (int k = 0; k < warmup; ++k) peak = std::max(peak, ++now);
  for (int k = 0; k < total - warmup; ++k) {
    peak = std::max(peak, ++now);
    --now;
  }
  return static_cast<double>(peak) / v;
}

double in_flight_micro_batches(const PlanLayout& l, int stage) {
  const std::vector<double> slots = chunk_slots(l, stage);
  double sum = 0;
  for (double k : slots) sum += k;
  return sum / static_cast<double>(slots.size());
}

double bubble_fraction(int pp, int micro_batches, int virtual_stages) {
  if (pp <= 1 || micro_batches < 1) return 0;
  const double p = pp, m = micro_batches;
  return (p - 1) / (m + p - 1) / std::max(1, virtual_stages);
}

std::pair<int, int> stage_blocks(const ModelDims& m, const PlanLayout& l, int s) {
  const int stages = l.pp * std::max(1, l.virtual_stages);
  if (static_cast<int>(l.stage_bounds.size()) == stages + 1) {
    return {l.stage_bounds[static_cast<size_t>(s)], l.stage_bounds[static_cast<size_t>(s) + 1]};
  }
  const int per = static_cast<int>(m.L) / stages;
  return {s * per, (s + 1) * per};
}

int moe_blocks(const ModelDims& m, int b0, int b1) {
  int n = 0;
  for (int i = b0; i < b1 && m.moe_layers > 0; ++i) n += engine::is_moe_layer(static_cast<int>(m.E), m.moe_every, i) ? 1 : 0;
  return n;
}

MemoryBreakdown stage_memory(const ModelDims& m, const PlanLayout& l, const Precision& prec,
                             double fragmentation, double reserved, int stage) {
  const ParamCounts pc = count_params(m);
  // ZeRO shards over dp x cp: the cp ranks hold the same weights and reduce their
  // gradients with dp in one group.
  const double tp = l.tp, ep = l.ep, dp = l.dp * l.cp, edp = std::max(1, l.dp / l.ep) * l.cp;
  const double pb = prec.param_bytes, gb = prec.grad_bytes, ab = prec.act_bytes;
  const int v = l.pp > 1 ? std::max(1, l.virtual_stages) : 1, stages = l.pp * v;
  // The rank's chunks are pipeline stages c * pp + stage (c < v), each a stage model with
  // its own blocks and activation slots; the first stage (0) also holds the embeddings,
  // the last (pp v - 1) the final norm and the head.
  const bool first = stage == 0, last = stage == l.pp - 1;
  constexpr int kZero3Prefetch = 1;
  int blocks = 0, moe_s = 0;
  // ZeRO-2/3 slots: each chunk is its own stage model with min(2, its blocks) gradient slots
  // and min(prefetch + 1, its blocks) parameter slots.
  int grad_slots = 0, param_slots = 0;
  for (int c = 0; c < v; ++c) {
    const auto [b0, b1] = stage_blocks(m, l, c * l.pp + stage);
    blocks += b1 - b0;
    moe_s += moe_blocks(m, b0, b1);
    grad_slots += std::min(2, b1 - b0);
    param_slots += std::min(kZero3Prefetch + 1, b1 - b0);
  }
  const double dense_s = blocks - moe_s, experts = m.E / ep;
  // Vocabulary rows of the embedding, head and logits on tp rank 0, the rank that holds
  // most: ceil(V / tp) (params.h vocab_rows; the last rank holds fewer).
  const double Vr = std::ceil(m.V / tp), vocab = Vr * m.C;

  MemoryBreakdown mb;
  mb.stage = stage;
  // Parameters: the tp-split part over tp, experts over ep; embeddings on the first
  // stage, final norm and head on the last (a tied head keeps a copy of the embedding there).
  // Experts are whole on every tp rank (expert-tensor-parallel 1: each tp rank routes its
  // own tokens, engine/model/moe_tp.cc).
  double dense = dense_s * (pc.layer_split / tp + pc.layer_repl) +
                 moe_s * (pc.moe_layer_split / tp + pc.moe_layer_repl);
  const double expert = moe_s * experts * (pc.expert_split + pc.expert_repl);
  if (first) dense += vocab + pc.positions;
  if (last) dense += pc.final_norm + (m.tied ? (l.pp > 1 ? vocab : 0) : vocab);
  mb.params = dense + expert;
  // ZeRO as the engine stores it (engine/model/sharding.h): stage 1 shards the optimizer
  // state and reduces the gradient into an fp32 shard next to the full buffer; stage 2
  // keeps no full gradient, only the shard plus two recycled block slots per chunk (fewer
  // for a chunk of one block) and the embedding and tail (final norm, untied head) slots;
  // stage 3 does the same for the weights with prefetch + 1 block slots ([plugins.zero3]
  // prefetch, default 1). Dense
  // parameters shard over dp, expert parameters over the expert-data-parallel group.
  auto sharded = [&](double bytes_per_param) {
    return dense * bytes_per_param / dp + expert * bytes_per_param / edp;
  };
  const double dense_block = pc.layer_split / tp + pc.layer_repl;
  const double moe_block = pc.moe_layer_split / tp + pc.moe_layer_repl + experts * (pc.expert_split + pc.expert_repl);
  const double block = std::max(dense_s > 0 ? dense_block : 0.0, moe_s > 0 ? moe_block : 0.0);
  // The embedding and tail slots; the tail of a last stage under pp holds a tied head's copy
  // of the embedding too.
  const double ends = (first ? vocab + pc.positions : 0) +
                      (last ? pc.final_norm + (m.tied && l.pp == 1 ? 0 : vocab) : 0);
  mb.weights = l.zero >= 3 ? sharded(pb) + (param_slots * block + ends) * pb : mb.params * pb;
  mb.grads = l.zero >= 2   ? sharded(kF32) + (grad_slots * block + ends) * gb
             : l.zero == 1 ? mb.params * gb + sharded(kF32)
                           : mb.params * gb;
  mb.optimizer = l.zero >= 1 ? sharded(prec.optimizer_bytes()) : mb.params * prec.optimizer_bytes();

  // Activations of one micro-batch (N tokens) as the engine allocates them; tensors of
  // the whole sequence split over tp only under sequence parallelism (seq), tensors inside
  // attention and the MLP always (split).
  // Context parallelism splits every sequence over cp ranks.
  const double N = static_cast<double>(l.micro_batch) * m.T / l.cp, C = m.C;
  const double seq = l.sp ? 1 / tp : 1, split = 1 / tp;
  // A block's records, as the engine allocates them (engine/model/block_records.h): the
  // attention core (att, lse), what selective recompute frees, and the rest (norms, qkv,
  // res2, fc, act), what full recompute frees too.
  engine::model::RecordDims dims;
  dims.batch = l.micro_batch;
  dims.seq = m.T / l.cp;
  dims.residual_rows = N * seq;
  dims.heads = m.H / tp;
  dims.hidden = C;
  dims.query = m.H * m.head_dim() * split;
  dims.qkv = m.qkv() * split;
  dims.fc = m.fc() * split;
  dims.ffn = m.F * split;
  const double core = engine::model::record_group_bytes(engine::model::RecordGroup::kCore, dims, ab);
  const double rest = engine::model::record_group_bytes(engine::model::RecordGroup::kRest, dims, ab);
  // A MoE block, per slot (engine/model/moe.cc moe_allocate), sized for the micro-batch's
  // N tokens even under tp (a rank routes N/tp of them, but keeps the capacity's layout):
  // router logits, slot indices and gates, expert input, hidden and output; under ep the
  // packed send side and the outputs coming back. Its backward buffers (also per slot):
  // gate and logit gradients, one expert's scratch, under ep the received rows' gradients
  // and the packed send buffer; under tp the exchanged choice counts (moe_tp.cc).
  const double cap = m.E > 0 ? expert_capacity(m, N) : 0, S = m.E * cap;
  const double moe_acts = N * m.E * ab + S * (kI32 + kF32) + S * 2 * C * ab + S * (m.fc() + m.F) * ab +
                          (l.ep > 1 ? S * (kI32 + kF32) + S * C * ab : 0);
  const double moe_ws = S * kF32 + N * m.E * ab + cap * 2 * C * ab + cap * (m.fc() + m.F) * ab +
                        (l.ep > 1 ? 3 * S * C * ab : 0) + (l.tp > 1 ? 3 * m.E * (1 + tp) * kF32 : 0);
  const bool none = m.recompute == Recompute::kNone, full = m.recompute == Recompute::kFull;
  const bool zbh1 = l.pp > 1 && l.sched == "zbh1";
  // Per chunk: one slot (a micro-batch in flight) keeps its residual stream res_[lo..hi],
  // its blocks' records, the token ids on the first stage, the targets and the head's
  // buffers on the last, and under ZB-H1 every GEMM's output gradient until the weight
  // gradient; the slots share what recompute rebuilds and the backward scratch.
  const std::vector<double> slots = chunk_slots(l, stage);
  double acts = 0, ws = 0, in_flight = 0;
  for (int c = 0; c < v; ++c) {
    const int s = c * l.pp + stage;
    const auto [b0, b1] = stage_blocks(m, l, s);
    const double Lc = b1 - b0;
    const int moe_c = moe_blocks(m, b0, b1);
    const bool has_embed = s == 0, has_head = s == stages - 1;
    double slot = (Lc + 1) * N * C * ab * seq;  // block inputs res_[lo..hi]
    if (none) slot += Lc * core;
    if (!full) slot += Lc * rest;
    slot += moe_c * moe_acts;
    if (has_embed) slot += N * kI32;  // token ids
    if (has_head) slot += N * kI32 + (N * C * ab + 2 * N * kF32) * seq + N * Vr * ab + 2 * N * kF32;
    if (zbh1) slot += Lc * N * (2 * C + m.fc() + m.qkv()) * ab + (has_head ? N * Vr * ab : 0);
    const double k = slots[static_cast<size_t>(c)];
    in_flight += k / v;
    acts += k * slot;
    if (!none) acts += core;  // the attention core, shared by all blocks and slots
    if (full) acts += rest;   // one block's worth, rebuilt in backward
    // Tensor parallel's vocabulary-parallel lookup and loss: six token-index and two fp32
    // per-token buffers (engine/model/vocab_parallel.cc tp_allocate).
    if (l.tp > 1) acts += 8 * N * kI32;
    // Backward scratch, shared by the chunk's blocks (MoE keeps its own per block). The
    // branch output and dln are whole sequences even under sp (a row-parallel output before
    // its reduce-scatter, a column-parallel input's gradient); dres, dbranch and
    // recompute's res scratch are the rank's rows.
    ws += N * C * ab + (full ? N * C * ab * seq : 0);             // branch, res scratch
    ws += 2 * N * C * ab * seq + N * C * ab + N * C * ab * split; // dres dbranch, dln, datt
    ws += N * (m.qkv() + m.fc() + m.F) * ab * split;              // dqkv dfc dact
    if (has_head) ws += N * kF32 + N * Vr * ab;                   // dloss, dlogits
    // Sequence parallel: the all-gathered input, the partial output, their whole-sequence
    // gradient, the rank's rows of it and a norm's gradient scratch (tp_allocate).
    if (l.tp > 1 && l.sp) ws += 3 * N * C * ab + N * C * ab * seq + 2 * C * gb;
    ws += k * moe_c * moe_ws;
    // Without sp, a MoE block's own rows before they are all-gathered (moe_tp.cc).
    if (l.tp > 1 && !l.sp && moe_c > 0) ws += N / tp * C * ab;
    // Pipeline transfers (the executor's): the received output gradient of every slot
    // unless the chunk is the last stage, the input gradient sent back of every
    // micro-batch unless it is the first.
    if (l.pp > 1 && !has_head) ws += k * N * C * ab * seq;
    if (l.pp > 1 && !has_embed) ws += l.grad_accum * N * C * ab * seq;
    // Context parallel, once per chunk (engine/model/context_attention.cc): the rank's
    // packed K/V block and its gradient, the learned positions of its rows (gpt2), and
    // the plugin's scratch_blocks() more blocks: the ring's two K/V blocks in flight (the
    // one in use and the one arriving), two running gradients and the arriving gradient
    // (5); the all-gather plugin's every rank's K and V and, in backward, their gradients
    // (2 cp).
    if (l.cp > 1) {
      const double kv = 2 * N * std::max(m.KV / tp, 1.0) * m.head_dim() * ab;
      const double scratch = l.cp_impl == "allgather" ? 2.0 * l.cp : 5.0;
      ws += (2 + scratch) * kv + (m.gpt2 ? N * 4 : 0);
    }
  }
  // A tied embedding split over the first and last stage: each receives the other's
  // gradient of it to sum them (Megatron's embedding group); under ZeRO each first gathers
  // its own stage's reduced gradient of it from the shards (fp32).
  if (l.pp > 1 && m.tied && (first || last)) ws += vocab * gb + (l.zero >= 1 ? vocab * kF32 : 0);
  mb.in_flight = in_flight;
  mb.activations = acts;
  mb.workspace = ws;

  // Communication buffers (not in the engine's accounting: they live in the strategies).
  // (Sequence parallel's gathered sequence and the pipeline's transfers are in the
  // workspace above.)
  double buffers = 0;
  if (l.dp * l.cp > 1 && l.zero < 3) buffers += 2 * std::min(kDpBucketBytes, (dense + expert) * 4);
  // (ZeRO-3's gathered and prefetched blocks are the weight slots above.)
  // (The expert dispatch's send and receive rows are the engine's: in the MoE terms above.)
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
