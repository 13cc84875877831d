// The step-time model: FLOPs of a training step (6 N tokens plus attention, plus what
// recompute repeats), per-micro-batch compute time on a stage from the profile's GEMM
// rate and memory bandwidth, communication time per axis from its bytes over the slowest
// link class it crosses plus per-message latency, the pipeline bubble, the part of the
// DP all-reduce that backward cannot hide, and the optimizer's memory traffic.
// Formulas in partrain-plan(1).
#pragma once

#include "layout/cost_model.h"
#include "planner/hardware.h"
#include "planner/memory.h"

namespace partrain::planner {

struct Flops {
  double model_per_token = 0;     // 3 x forward: what MFU counts (no recompute)
  double hardware_per_token = 0;  // what the devices execute (with recompute)
  double forward_per_token = 0;   // 2 x active matmul weights + 4 T C per layer
  double attention_per_token = 0;  // the attention-core part of hardware_per_token
};
Flops flops_per_token(const ModelDims& m, const ParamCounts& p);

// Seconds of each part of one optimizer step on the slowest rank.
struct StepTime {
  double compute = 0;      // m micro-batches of forward + backward (+ recompute)
  double tp = 0, ep = 0, cp = 0;  // collectives inside the step, not overlapped
  double pp = 0;           // point-to-point activations and gradients
  double bubble = 0;       // pipeline fill and drain
  double dp = 0;           // the gradient all-reduce (or ZeRO's reduce-scatter + gathers)
  double dp_exposed = 0;   // ... the part backward does not hide
  double optimizer = 0;    // AdamW over the rank's (sharded) state
  double total = 0;
  double tokens_per_s = 0, tokens_per_s_per_gpu = 0;
  double mfu = 0;                  // model FLOPs / (step time x peak of every device)
  double model_flops_per_gpu = 0;  // achieved FLOP/s per device, model FLOPs
  double hardware_flops_per_gpu = 0;  // ... counting recompute, as Megatron-LM reports
};

struct StepInputs {
  ModelDims model;
  ParamCounts params;
  PlanLayout layout;
  MemoryBreakdown memory;
  double act_bytes_per_micro_batch = 0;  // activations of one micro-batch, no recompute
  Precision precision;
  StepCost traffic;       // activations' precision
  StepCost grad_traffic;  // gradients' precision (the DP part is used)
  int nodes = 1, gpus_per_node = 1;
};

StepTime predict_step(const StepInputs& in, const HardwareProfile& hw);

}  // namespace partrain::planner
