// Memory per device for one layout: parameter counts of the model, what one rank holds of
// them, and its bytes by category (weights, gradients, optimizer state, activations,
// workspace, communication buffers), the same categories the engine accounts
// (engine/backend.h MemoryStats), so a prediction can be held against a run's
// "peak memory" line. The formulas, term by term, are in partrain-plan(1).
//
// Single-device, tensor-parallel and ZeRO terms follow what the engine allocates
// (engine/model/model.cc allocate, vocab_parallel.cc tp_allocate, sharding.cc, moe.cc,
// train/optimizer.cc) tensor by tensor, on tp rank 0 (the most vocabulary rows); a block's
// activation records come from the list the engine allocates from
// (engine/model/block_records.h); the
// pipeline terms follow the pipeline executor (worker/pipeline_executor.cc and the
// engine's stage models): a stage's contiguous blocks as pipeline/partition.h splits
// them, embeddings on the first stage, final norm and head on the last (a tied embedding
// on both), one activation slot per micro-batch the schedule keeps in flight on each chunk
// (GPipe m, 1F1B at most p), the transfers' gradient buffers.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/options.h"
#include "planner/hardware.h"

namespace partrain::planner {

// The model with its defaults resolved (kv_heads, ffn_hidden), as the engine resolves them.
struct ModelDims {
  bool gpt2 = true;
  double V = 0, T = 0, C = 0, L = 0, H = 0, KV = 0, F = 0;
  double E = 0, top_k = 0, capacity_factor = 1.25;
  int moe_layers = 0;  // blocks whose MLP is E experts
  int moe_every = 1;   // MoE on blocks where (layer + 1) % moe_every == 0
  bool tied = true;
  engine::Recompute recompute = engine::Recompute::kNone;
  double head_dim() const { return C / H; }
  double qkv() const { return (H + 2 * KV) * head_dim(); }  // fused q,k,v width
  double fc() const { return gpt2 ? F : 2 * F; }            // first MLP GEMM's width
};
ModelDims model_dims(const engine::ModelOptions& options);

// Parameters by where they live. Matrices and column-parallel biases split over tp;
// row-parallel biases, norms, positions and the router are replicated.
struct ParamCounts {
  double embed = 0;        // token embedding V*C (vocab-parallel: ceil(V / tp) rows)
  double positions = 0;    // learned positions T*C (gpt2)
  double head = 0;         // untied LM head V*C (the same rows); 0 when tied
  double final_norm = 0;   // final LayerNorm/RMSNorm
  double layer_split = 0;  // one dense block's tp-split part (matrices, column biases)
  double layer_repl = 0;   // one dense block's replicated part (norms, row biases)
  double moe_layer_split = 0;  // one MoE block without experts, tp-split (attention)
  double moe_layer_repl = 0;   // ... replicated (norms, row biases, router)
  double expert_split = 0;     // one expert's tp-split part
  double expert_repl = 0;      // one expert's replicated part (row bias)
  double total = 0;            // the whole model
  double active_matmul = 0;    // matmul weights one token passes through (top_k experts)
};
ParamCounts count_params(const ModelDims& m);

// The layout as the planner needs it; every field is settled (dp and m derived).
struct PlanLayout {
  int tp = 1, pp = 1, dp = 1, ep = 1, cp = 1, zero = 0, virtual_stages = 1;
  bool sp = false;
  std::string sched = "1f1b";
  // The context plugin exchanging keys and values over cp: "ring" (blocks passed around
  // the cp group) or "allgather" (every rank gathers all of them).
  std::string cp_impl = "ring";
  int micro_batch = 1;  // sequences per micro-batch per rank
  int grad_accum = 1;   // micro-batches per step, the pipeline's m
  // Block boundaries of the pp * v pipeline stages: stage s holds blocks
  // [stage_bounds[s], stage_bounds[s + 1]), as pipeline/partition.h splits the model for
  // the runtime. Empty: L / (pp v) blocks each.
  std::vector<int> stage_bounds;
  int world() const { return tp * cp * pp * dp; }
};

// What one rank holds, in bytes, by category.
struct MemoryBreakdown {
  int stage = 0;               // the pipeline stage this is for
  double params = 0;           // parameters on the rank (before ZeRO sharding)
  double weights = 0, grads = 0, optimizer = 0;
  double activations = 0;      // kept for backward (x in-flight micro-batches)
  double workspace = 0;        // backward scratch and recompute buffers, once
  double in_flight = 1;        // micro-batches whose activations are alive at the peak
  double comm_buffers = 0;     // DP buckets, ZeRO-3 gathers, PP send/recv, EP dispatch
  double margin = 0;           // fragmentation margin
  double reserved = 0;         // CUDA context and the like (from the profile)
  // What the engine's MemoryStats counts (everything but buffers, margin and reserved).
  double engine_total() const { return weights + grads + optimizer + activations + workspace; }
  double total() const { return engine_total() + comm_buffers + margin + reserved; }
};

// Rank memory of pipeline stage `stage` (0 = first).
MemoryBreakdown stage_memory(const ModelDims& m, const PlanLayout& l, const Precision& p,
                             double fragmentation, double reserved, int stage);
// Every stage's rank, first to last (one entry without a pipeline).
std::vector<MemoryBreakdown> all_stage_memory(const ModelDims& m, const PlanLayout& l,
                                              const Precision& p, double fragmentation,
                                              double reserved);
// The stage with the largest total: what decides whether the layout fits.
MemoryBreakdown peak_memory(const ModelDims& m, const PlanLayout& l, const Precision& p,
                            double fragmentation, double reserved);

// Activation slots of each of the rank's v chunks (pipeline stages c * pp + stage): the
// most micro-batches whose activations the chunk holds at once in the rank's action order,
// as the shipped schedules (plugins/pipeline) order them and the pipeline executor
// allocates them (a slot per micro-batch in flight, per chunk): {1} without pipelining,
// {m} for GPipe, {min(p - stage, m)} for 1F1B (at most p, on the first stage),
// {min(p, m)} for ZB-H1 (inputs kept until the delayed weight gradient), and for
// interleaved each chunk's own peak in Megatron's interleaved order (their sum is at least
// the rank's peak, p (1 + (p-1)/(p v)) chunk micro-batches on the first stage). Unknown
// schedules count as 1F1B.
std::vector<double> chunk_slots(const PlanLayout& l, int stage);
// The rank's in-flight micro-batches in units of its whole share of the layers: the sum of
// chunk_slots over v.
double in_flight_micro_batches(const PlanLayout& l, int stage);
// The most micro-batches (in the same units) the rank holds at one moment, for a runtime
// that allocates activations as they come (Megatron): under interleaving the peak of the
// chunks' sum, p (1 + (p-1)/(p v)) on the first stage (Korthikanti et al., section 4.2.3),
// at most the sum of the chunks' own peaks that in_flight_micro_batches counts.
double rank_peak_in_flight(const PlanLayout& l, int stage);

// Blocks [first, end) of pipeline stage s of the pp * v stages (the layout's stage_bounds,
// else L / (pp v) each), and the MoE blocks among blocks [b0, b1).
std::pair<int, int> stage_blocks(const ModelDims& m, const PlanLayout& l, int s);
int moe_blocks(const ModelDims& m, int b0, int b1);

// The pipeline bubble, the idle fraction of a step: (p-1)/(m+p-1), divided by v when
// interleaved.
double bubble_fraction(int pp, int micro_batches, int virtual_stages = 1);

}  // namespace partrain::planner
