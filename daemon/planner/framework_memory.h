// Memory per device as a Megatron-style or FSDP framework holds it (Runtime::memory ==
// MemoryModel::kFramework), for planning runs of other frameworks (bench/planner's published
// runs): Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
// Models" (MLSys 2023), section 4 and Table 2, with the attention core fused (no T x T
// tensor kept: FlashAttention keeps its output and the log-sum-exp).
//
// Per block and micro-batch of s = T/cp tokens x b sequences, h = C, t = tp, sigma = 1/t
// under sequence parallelism (else 1), bytes (2-byte activations):
//   no recompute, selective:  LN1 input 2 s b h sigma, QKV input 2 s b h sigma, Q K V
//     2 s b qkv / t, attention output 2 s b h / t, log-sum-exp 4 s b a / t, LN2 input and
//     fc1 input 2 s b h sigma each, the activation's input 2 s b fc / t and output
//     2 s b F / t, and with dropout one byte per element of the two residual masks
//     (GPT-3: 34 s b h / t with sp, Korthikanti's Table 2 less its 5 a s^2 b score term);
//     a materialized attention adds its scores, probabilities and dropout mask,
//     5 a s^2 b / t (the selective mode recomputes and drops exactly these);
//   full: the block input only, 2 s b h sigma, plus one block's activations rebuilt in backward.
// The rank holds the in-flight micro-batches of its schedule (memory.h chunk_slots: 1F1B
// p - stage, interleaved p (1 + (p-1)/(p v)) on the first stage), the last stage the logits
// once.
// States in mixed precision with Adam: bf16 weights (2), fp32 gradients (4), fp32 master and
// two moments (12) per parameter; ZeRO-1 (the distributed optimizer) shards the 12 over
// dp x cp, ZeRO-2 also the gradients, ZeRO-3 (FSDP) everything (its fp32 master shard is the
// parameter: 16 bytes over dp), keeping two gathered blocks (the one computing and the one
// prefetched) and their bf16 gradients. The logits take 6 s b V / t (2 with a fused loss).
//
// Worked example: Llama 2 70B (h 8192, 80 blocks, F 28672, GQA qkv 10240) at T 4096, b 1,
// tp8 with sp, no recompute: (2+2+2+2)x8192 + 2x10240 + 2x8192 + 2x57344 + 2x28672 =
// 268 KiB per token per block, 33.5 KiB over tp8: x 4096 tokens x 80 blocks = 10.5 GiB
// (the log-sum-exp adds 0.1%).
#pragma once

#include <vector>

#include "planner/memory.h"
#include "planner/runtime.h"

namespace partrain::planner {

// Rank memory of pipeline stage `stage` as the framework `rt` holds it.
MemoryBreakdown framework_stage_memory(const ModelDims& m, const PlanLayout& l, const Runtime& rt,
                                       double fragmentation, double reserved, int stage);

// Every stage's rank, first to last, as stage_memory or framework_stage_memory by `rt.memory`.
std::vector<MemoryBreakdown> runtime_stage_memory(const ModelDims& m, const PlanLayout& l, const Runtime& rt,
                                                  const Precision& p, double fragmentation, double reserved);

}  // namespace partrain::planner
