// A framework's memory per rank (see framework_memory.h).
#include "planner/framework_memory.h"

#include <algorithm>
#include <cmath>

namespace partrain::planner {
namespace {

using engine::Recompute;

constexpr double kAct = 2, kF32 = 4;       // bf16 activations, fp32 statistics and logits
constexpr double kWeight = 2, kGrad = 4, kAdam = 12;  // bytes per parameter (framework_memory.h)
constexpr double kBucketBytes = 2 * 25.0 * (1 << 20);  // DDP's two 25 MB buckets in flight

// Bytes one block keeps for backward per token of a micro-batch.
double block_bytes(const ModelDims& m, const PlanLayout& l, const Runtime& rt, double seq) {
  const double t = l.tp, sigma = l.sp ? 1 / t : 1, h = m.C;
  if (m.recompute == Recompute::kFull) return kAct * h * sigma;
  double b = kAct * h * sigma * 4                    // LN1, QKV, LN2, fc1 inputs
             + kAct * (m.qkv() + m.H * m.head_dim()) / t  // Q K V, attention output
             + kF32 * m.H / t                         // log-sum-exp per query and head
             + kAct * (m.fc() + m.F) / t;             // activation input and output
  if (rt.attention_dropout) b += 2 * h * sigma;       // the residual dropout masks (bytes)
  if (rt.attention == AttentionKernel::kMaterialized && m.recompute == Recompute::kNone) {
    b += (2 * kAct + (rt.attention_dropout ? 1 : 0)) * m.H * seq / t;  // scores, softmax, mask
  }
  return b;
}

}  // namespace

MemoryBreakdown framework_stage_memory(const ModelDims& m, const PlanLayout& l, const Runtime& rt,
                                       double fragmentation, double reserved, int stage) {
  const ParamCounts pc = count_params(m);
  const double tp = l.tp, dp = static_cast<double>(l.dp) * l.cp;
  const int v = l.pp > 1 ? std::max(1, l.virtual_stages) : 1, stages = l.pp * v;
  const bool first = stage == 0, last = stage == l.pp - 1;
  const double vocab = std::ceil(m.V / tp) * m.C;
  MemoryBreakdown mb;
  mb.stage = stage;
  // Parameters on the rank, as memory.h counts them (experts over ep, whole on each tp rank).
  int blocks = 0, moe_s = 0;
  for (int c = 0; c < v; ++c) {
    const auto [b0, b1] = stage_blocks(m, l, c * l.pp + stage);
    blocks += b1 - b0;
    moe_s += moe_blocks(m, b0, b1);
  }
  const double dense_block = pc.layer_split / tp + pc.layer_repl;
  double params = (blocks - moe_s) * dense_block +
                  moe_s * (pc.moe_layer_split / tp + pc.moe_layer_repl +
                           m.E / l.ep * (pc.expert_split + pc.expert_repl));
  if (first) params += vocab + pc.positions;
  if (last) params += pc.final_norm + (m.tied ? (l.pp > 1 ? vocab : 0) : vocab);
  mb.params = params;
  const double block = dense_block;  // a gathered ZeRO-3 block
  // ZeRO-3 (FSDP) keeps no bf16 copy of its shard: the fp32 master shard (in the 12 bytes
  // of optimizer state) is the parameter, cast when gathered.
  mb.weights = l.zero >= 3 ? 2 * block * kWeight : kWeight * params;
  mb.grads = l.zero >= 2 ? kGrad * params / dp + (l.zero >= 3 ? 2 * block * kAct : 0) : kGrad * params;
  mb.optimizer = l.zero >= 1 ? kAdam * params / dp : kAdam * params;

  // Activations: every chunk's in-flight micro-batches, each with its blocks' bytes.
  const double seq = m.T / l.cp, tokens = static_cast<double>(l.micro_batch) * seq;
  // Activations are allocated as micro-batches arrive, so the rank's peak counts: its
  // blocks times the most micro-batches it holds at once (rank_peak_in_flight).
  const double in_flight = rank_peak_in_flight(l, stage);
  double acts = in_flight * tokens * blocks * block_bytes(m, l, rt, seq), per_block_tokens = 0;
  if (first) acts += in_flight * tokens * kAct * m.C * (l.sp ? 1 / tp : 1);  // embedding output
  // One block's full activations: rebuilt under full recompute, and the gradients of the
  // block in backward.
  ModelDims none = m;
  none.recompute = Recompute::kNone;
  per_block_tokens = block_bytes(none, l, rt, seq);
  double ws = tokens * per_block_tokens * (m.recompute == Recompute::kFull ? 2 : 1);
  // The logits, and unless the loss is fused the fp32 copy it takes.
  if (stage == l.pp - 1 || stages == 1) {
    ws += tokens * std::ceil(m.V / tp) * (kAct + (rt.fused_cross_entropy ? 0 : kF32));
  }
  mb.in_flight = in_flight;
  mb.activations = acts;
  mb.workspace = ws;
  mb.comm_buffers = l.dp * l.cp > 1 && l.zero == 0 ? kBucketBytes : 0;
  mb.margin = fragmentation * (mb.engine_total() + mb.comm_buffers);
  mb.reserved = reserved;
  return mb;
}

std::vector<MemoryBreakdown> runtime_stage_memory(const ModelDims& m, const PlanLayout& l, const Runtime& rt,
                                                  const Precision& p, double fragmentation, double reserved) {
  if (rt.memory == MemoryModel::kEngine) return all_stage_memory(m, l, p, fragmentation, reserved);
  std::vector<MemoryBreakdown> out;
  for (int s = 0; s < std::max(1, l.pp); ++s) out.push_back(framework_stage_memory(m, l, rt, fragmentation, reserved, s));
  return out;
}

}  // namespace partrain::planner
