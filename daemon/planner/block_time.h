// The time of one micro-batch through one transformer block on one rank, forward and
// backward, from the kernels it runs: its GEMMs at their shapes (gemm.h), the attention
// core (a fused FlashAttention kernel, or materialized scores), the elementwise kernels
// between them at the memory bandwidth, and the collectives of tensor, context and
// expert parallelism (collectives.h) that the runtime does not hide behind them. Also the
// LM head with its loss (last stage) and the embedding (first stage).
//
// Per block, n = b T / cp tokens on the rank, t = tp, s = 1/t with sequence parallelism:
//   GEMMs (forward; backward = the input- and weight-gradient GEMMs of each):
//     qkv [n x QKV/t x C], proj [n x C x H hd/t], fc1 [n x FC/t x C], fc2 [n x C x F/t]
//     (MoE: router [n x E x C], each of the E/ep local experts [c x FC/t x C] and
//     [c x C x F/t] with c = cf n k ep / E tokens)
//   attention (per rank H/t heads, the rank's T/cp queries against the causal prefix of
//     all T keys): fused runs 4 b (H/t) hd (T/cp) (T/2) FLOPs forward and 2.5 times that
//     backward at gemm.h's fused_attention_rate for the keys a call sweeps (T with the
//     all-gather context plugin, T/cp per ring step), the kernel class's (the device's best,
//     or FlashAttention-2) times the runtime's attention_relative_rate, the pair split
//     1 : 2.5/0.85; materialized runs the batched GEMMs
//     Q K^T [T/cp x T x hd] and P V [T/cp x hd x T] (and their four backward GEMMs, which
//     write and read the scores) and the softmax streams them twice forward and three
//     times backward (+2.5 each with attention dropout: probabilities, output and mask)
//   elementwise, forward: two norms 4 C s, two residual adds 6 C s, the activation
//     2F/t (GELU) or 3F/t (SwiGLU), RoPE 2 (H + KV) hd / t, per token, at
//     memory_bandwidth x elementwise_efficiency; backward twice that
//   recompute: full repeats the forward (and its tp collectives), selective the attention
//     core's forward (Megatron's core-attention recompute, materialized or fused)
//   tp: per micro-batch 2 all-reduces of n C bytes forward and 2 backward (under sp an
//     all-gather and a reduce-scatter for each); with tp_overlap each all-gather or
//     reduce-scatter hides behind its GEMM but for the part longer than the GEMM and one
//     1/t chunk
//   cp: ring: cp-1 sends of the rank's K and V (2 b (T/cp) max(KV/t, 1) hd bytes) forward,
//     cp-1 of K, V and their gradients backward, each hidden behind 1/cp of the attention;
//     allgather: an all-gather of every rank's K and V forward, a reduce-scatter of their
//     gradients backward, not hidden
//   ep: 4 all-to-alls (dispatch and combine, forward and backward) of k n C / t bytes
#pragma once

#include <string>

#include "planner/collectives.h"
#include "planner/hardware.h"
#include "planner/memory.h"
#include "planner/runtime.h"

namespace partrain::planner {

// Where each parallel axis' groups sit (the worst group of each axis).
struct Spans {
  GroupSpan tp, cp, ep, dp, expert_dp, pp;  // dp and expert_dp include cp (one group)
};

// Seconds of one micro-batch through one block on one rank.
struct BlockCost {
  double forward = 0, backward = 0;  // compute: GEMMs, attention, elementwise
  double recompute = 0;              // what recompute runs again during backward
  double tp = 0, cp = 0, ep = 0;     // communication the runtime does not hide
  double compute() const { return forward + backward + recompute; }
  double total() const { return compute() + tp + cp + ep; }
};

BlockCost block_cost(const ModelDims& m, const PlanLayout& l, bool moe, const Runtime& rt,
                     const Spans& spans, const Precision& p, const HardwareProfile& hw);

// The LM head and its loss for one micro-batch (the last stage): the [n x V/t x C] GEMM
// and its backward, the final norm, and the cross-entropy streaming the logits (read in
// the activations' precision, six fp32 passes, the gradient written back).
double head_seconds(const ModelDims& m, const PlanLayout& l, const Runtime& rt, const Precision& p,
                    const HardwareProfile& hw);

// The embedding for one micro-batch (the first stage): the lookup written, and the
// gradient added into the fp32 table in backward.
double embedding_seconds(const ModelDims& m, const PlanLayout& l, const Precision& p,
                         const HardwareProfile& hw);

}  // namespace partrain::planner
