// The step-time model: one optimizer step on the slowest rank, from the blocks each
// pipeline rank holds (the cost-balanced partition the memory model uses, or the
// runtime's uniform one), each block timed kernel by kernel (block_time.h), the pipeline
// composed from the ranks' micro-batch times (busy m x slowest rank, bubble (p-1)/v of a
// rank's micro-batch), the gradient reduction over dp x cp with what the last
// micro-batch's backward hides, and AdamW's memory traffic. Formulas in partrain-plan(1).
#pragma once

#include <vector>

#include "planner/block_time.h"
#include "planner/hardware.h"
#include "planner/memory.h"
#include "planner/runtime.h"

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
  double tp = 0, ep = 0, cp = 0;  // collectives inside the step, not hidden
  double pp = 0;           // point-to-point activations and gradients on the critical path
  double bubble = 0;       // pipeline fill and drain
  double dp = 0;           // the gradient reduction (and ZeRO's parameter gathers)
  double dp_exposed = 0;   // ... the part backward and forward do not hide
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
  PlanLayout layout;  // stage_bounds filled when pp > 1
  Precision precision;
  Runtime runtime;
  Spans spans;
};

StepTime predict_step(const StepInputs& in, const HardwareProfile& hw);

}  // namespace partrain::planner
