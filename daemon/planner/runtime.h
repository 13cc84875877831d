// What the training runtime does with a layout beyond its arithmetic: which attention
// kernel it runs, which communication it hides behind compute, how it splits the pipeline.
// `partrain plan` predicts partrain's own runtime (the defaults below); the validation
// against published runs (bench/planner/) describes each paper's framework with the same
// fields, so one physical model is checked against all of them.
#pragma once

namespace partrain::planner {

enum class AttentionKernel {
  kMaterialized,  // Q K^T written to memory, softmax over it, then the scores times V
  kFused,         // one kernel (FlashAttention, partrain's CPU loops): no T x T tensor in
                  // memory, the causally masked half skipped
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
};

// partrain's own runtime on a device (the defaults above) with the attention its engine
// picks for `score_bytes` of scores per attention call: the CPU engine's causal loops
// (engine/cpu/attention.cc) are one fused kernel; the CUDA engine materializes the scores
// with cuBLAS unless their workspace passes 4 GiB, then runs its flash kernel
// (engine/cuda/cuda_backend.cc use_flash).
inline Runtime partrain_runtime(bool cpu, double score_bytes) {
  Runtime r;
  constexpr double kGemmWorkspaceLimit = 4.0 * (1ull << 30);
  r.attention = cpu || score_bytes > kGemmWorkspaceLimit ? AttentionKernel::kFused : AttentionKernel::kMaterialized;
  return r;
}

}  // namespace partrain::planner
