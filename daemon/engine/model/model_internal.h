// Activation records of one block and one MoE feed-forward, shared by model.cc, block.cc
// and moe.cc. Not part of the engine's interface.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/backend.h"
#include "engine/model/expert_parallel.h"
#include "engine/model/model.h"

namespace partrain::engine::model {

// What one block keeps from forward for backward. Under recompute some of these are views
// of one buffer shared by all blocks (see Model::allocate).
struct BlockActs {
  Tensor ln1, ln1_mean, ln1_rstd;  // attention input norm [N, C], stats [N]
  Tensor qkv;                      // [N, (H + 2 KV) hd], q and k after RoPE
  Tensor att, lse;                 // attention output [N, C], log-sum-exp [B, H, T]
  Tensor res2;                     // residual after attention [N, C]
  Tensor ln2, ln2_mean, ln2_rstd;  // MLP input norm
  Tensor fc, act;                  // MLP hidden before/after the nonlinearity
  Tensor branch;                   // scratch: a branch's output before the residual add
};

// Routing and expert activations of one MoE block. Expert e's rows live at
// [e * cap_max, e * cap_max + count[e]) of the packed buffers.
struct MoeState {
  int cap_max = 0;     // capacity for the largest micro-batch (buffer stride)
  int cap = 0;         // capacity for the current micro-batch
  Tensor logits;       // router logits [N, E]
  Tensor idx, gate;    // I32 / F32 [E * cap_max]: token index and combine weight per slot
  Tensor xin, h, act, y;  // expert input [., C], hidden [., F or 2F], act [., F], output [., C]
  Tensor dgate, dlogits;  // F32 [E * cap_max], [N, E]
  Tensor dy, dh, dactv, dxin;  // backward scratch for one expert [cap_max, .]
  int rows = 0;        // tokens this rank routes in the current micro-batch (N, or N/tp)
  // Host side.
  std::vector<int> count;            // tokens kept per expert (of this rank's)
  std::vector<int> admitted_before;  // tp: kept per expert from the earlier tp ranks' tokens
  std::vector<float> probs;          // router softmax [N, E]
  std::vector<int32_t> choice;       // chosen experts [N, k], best first
  std::vector<float> weight;         // combine weight of each choice [N, k]
  std::vector<int32_t> slot;         // packed slot of each choice, -1 if dropped [N, k]
  std::vector<double> frac;          // f_e: share of the N*k choices that picked e
  std::vector<int32_t> host_idx;
  std::vector<float> host_gate, host_buf, host_dgate;
  std::vector<double> chosen, mean_p, dp;  // per expert: choices and summed probabilities
                                           // of the micro-batch (after the tp exchange)
  std::vector<int> order, admitted;
  std::vector<float> row_probs;      // another cp or tp rank's token's probabilities (scratch)
  // Context parallel: every cp rank's router logits ([cp N, E], device and host; under tp
  // first this cp rank's N rows gathered over tp) and, per routed token of the micro-batch,
  // this rank's row of it or -1.
  Tensor gathered, tp_logits;
  std::vector<float> host_gathered;
  std::vector<int> mine;
  // Expert parallel (expert_parallel.h): xin, h, act and y hold the received rows of the
  // local experts (receive order); the kept rows of this rank packed by expert for sending.
  DispatchPlan plan;
  Tensor send_idx, send_gate;   // I32 / F32 [E * cap_max]: token and weight per packed row
  Tensor xsend;                 // [E * cap_max, C]: packed x, then dy, then dx coming back
  Tensor yback;                 // [E * cap_max, C]: the experts' outputs, back on the source
  Tensor dyrecv, dxrecv;        // [E * cap_max, C]: the received rows' dy and their dx
  Tensor counts;                // F32 [2E]: the rows sent to each expert, then received (backend memory)
  std::vector<int32_t> host_send_idx;
  std::vector<float> host_send_gate, send_counts, recv_counts;
  // Tensor parallel: this rank's choice counts and probability sums ([3E]) and every rank's.
  Tensor tp_mine, tp_all;
};

// One micro-batch's activations and state, as a pipeline stage keeps them per slot: the
// Model members of the same names, swapped in and out (Model::swap_slot).
struct ActSlot {
  Tensor tokens, targets;
  std::vector<Tensor> res;
  std::vector<std::unique_ptr<BlockActs>> acts;
  std::vector<std::unique_ptr<MoeState>> moe;
  Tensor lnf, lnf_mean, lnf_rstd, logits, losses, lse;
  MicroBatch batch;
  int B = 0, N = 0, R = 0, loss_count = 0;
  float aux_loss = 0;
  Tensor tok_local, tok_mask;          // tensor parallel: the vocabulary-parallel lookup
  std::vector<int32_t> host_targets;   // tensor parallel: the targets the loss reads
  std::vector<Tensor> wgrad_dout;      // split backward: one kept dout per GEMM site
  std::vector<Tensor> wgrad_inp;       // ... and its input, where that lives in shared buffers
  std::vector<DeferredGrad> deferred;  // what backward-input left for backward-weight
};

}  // namespace partrain::engine::model
