// What the training runtime does with a layout beyond its arithmetic: which attention
// kernel it runs, which communication it hides behind compute, how it splits the pipeline.
// `partrain plan` predicts partrain's own runtime (the defaults below); the validation
// against published runs (bench/planner/) describes each paper's framework with the same
// fields, so one physical model is checked against all of them.
#pragma once

namespace partrain::planner {

enum class AttentionKernel {
  kMaterialized,  // Q K^T written to memory, softmax over it, then the scores times V
  kFused,         // one kernel, the device's best (cuDNN SDPA or FlashAttention-3 on Hopper,
                  // FlashAttention-2 on Ampere, partrain's CPU loops): no T x T tensor in
                  // memory, the causally masked half skipped
  kFusedFa2,      // a FlashAttention-2 class kernel (torch SDPA's flash backend, the flash
                  // package before v3): fused, at the profile's attention_efficiency_fa2
};

// Whose allocations the memory model counts.
enum class MemoryModel {
  kEngine,     // partrain's engine, tensor by tensor (memory.h stage_memory)
  kFramework,  // a Megatron-style or FSDP framework: Korthikanti et al.'s activation
               // formulas per recompute mode (framework_memory.h)
};

struct Runtime {
  // Default: materialized, as partrain's CUDA attention for short sequences
  AttentionKernel attention = AttentionKernel::kMaterialized;
  // Dropout on the attention probabilities (Megatron's attention_dropout): two more passes
  // over the scores and a mask, forward and backward (materialized kernel only). Default: false
  bool attention_dropout = false;
  // Tensor-parallel all-gathers and reduce-scatters (sequence parallelism) pipelined with
  // the GEMM next to them, as Megatron-core's --tp-comm-overlap does. Default: false
  bool tp_overlap = false;
  // Only backward's tensor-parallel collectives hidden: each behind the other gradient GEMM
  // of its layer (Megatron's asynchronous gradient all-reduce and sequence-parallel
  // all-gather, 2022). Default: false
  bool tp_backward_overlap = false;
  // Gradient reduction bucketed and started during the last micro-batch's backward (the
  // dp plugin's buckets; DDP; Megatron-core --overlap-grad-reduce). Default: true
  bool dp_overlap = true;
  // ZeRO's parameter all-gather started during the next step's first forward
  // (Megatron-core --overlap-param-gather). Default: false
  bool param_gather_overlap = false;
  // Pipeline sends and receives overlapped with the next chunk's compute (Megatron-core's
  // interleaved schedule); otherwise every transfer is on the critical path. Default: false
  bool pp_overlap = false;
  // Each tensor-parallel rank sends 1/tp of a stage's output (Megatron's scatter-gather, and
  // what sequence parallelism gives anyway); otherwise every rank sends all of it. Default: true
  bool pp_scatter_gather = true;
  // Gradients of each micro-batch added into the fp32 accumulator by a separate pass over
  // the rank's gradients (DeepSpeed) instead of inside the weight-gradient GEMM. Default: false
  bool grad_accumulation_pass = false;
  // Stages split by cost (pipeline::partition_stages, partrain's executor); otherwise
  // layers / (pp v) blocks each with the embedding and head on top (Megatron, DeepSpeed).
  // Default: true
  bool balanced_partition = true;
  // Bytes per gradient element on the wire; 0 = the precision's gradient bytes. Default: 0
  int grad_wire_bytes = 0;
  // Parameters per gradient bucket: each bucket's reduction is its own collective and pays
  // its latency (DDP and the dp plugin: 25 MB of fp32, 6.55M; Megatron-core: 40M). Default: 6.55e6
  double grad_bucket_params = 25.0 * (1 << 20) / 4;
  // ZeRO-2/3 reduce-scatter the gradients after every micro-batch (PyTorch FSDP) instead of
  // accumulating them and reducing once, during the last micro-batch's backward (Megatron's
  // distributed optimizer, partrain's zero plugins). Default: false
  bool reduce_every_micro_batch = false;
  // ZeRO-3 gathers the block before next during backward while this one computes
  // (partrain's zero3 plugin, FSDP2, FSDP's BACKWARD_PRE); false: only after this block's
  // gradients are done (FSDP's default BACKWARD_POST), so every backward gather is exposed
  // but for the reduce-scatter it runs beside. Default: true
  bool zero3_backward_prefetch = true;
  // The loss reads the logits once and writes their gradient in one kernel (Megatron's
  // fused vocab-parallel cross entropy, flash-attn's xentropy); false: six fp32 passes over
  // the logits (partrain's engine). Default: false
  bool fused_cross_entropy = false;
  // The framework's fused attention kernel's rate against its class's (kFused, kFusedFa2):
  // below 1 for an older kernel of the class, e.g. the Triton flash attention of
  // llm-foundry's attn_impl: triton at 1/1.9 of FlashAttention-2 (Dao 2023: FlashAttention-2
  // is 1.3-2.5x faster than it). Default: 1
  double attention_relative_rate = 1;
  // Whose allocations the memory model counts. Default: the engine's
  MemoryModel memory = MemoryModel::kEngine;
};

// partrain's own runtime on a device (the defaults above): fused attention on both, the
// CPU engine's causal loops (engine/cpu/attention.cc) and the CUDA engine's cuDNN SDPA
// (engine/cuda: the fused path every framework behind the published runs uses).
inline Runtime partrain_runtime(bool cpu) {
  Runtime r;
  (void)cpu;
  r.attention = AttentionKernel::kFused;
  return r;
}

}  // namespace partrain::planner
