// Checks a layout against the cluster, the model and the batch before anything runs, so a
// bad job is refused at submit time (SPANK) or at start (partrain run) with a message that
// says what to change, never after GPUs are allocated and warmed up.
//
// The invariants, in the order they are checked (DESIGN.md, "Parallel layout"):
//   degrees          tp, pp, cp, ep >= 1, zero 0..3 (0 with grad=NAME), virtual stages >= 1
//   world            W % (tp*cp*pp) == 0; an explicit dp multiplies out to W; ep divides dp x cp
//   NVLink           tp <= NVLink domain (GPUs per node) and tp divides it
//   model            heads, kv_heads and hidden % tp; seq_len % tp under sequence
//                    parallelism and % 2cp (cp chunks); layers % (pp * virtual stages); experts % ep
//                    (and ep > 1 only for a model with experts)
//   batch            global_batch == micro_batch * grad_accum * dp with grad_accum whole;
//                    with mb=M in the spec, grad_accum = M and the micro-batch becomes
//                    global_batch / (M * dp), which must be whole
//                    (e.g. global_batch 16, dp2, mb=4: micro-batches of 2)
//   schedule         1f1b / interleaved need micro-batches m >= pp; interleaved needs m % pp;
//                    a suggested mb=K is one these checks and the batch accept
// A field left at its "unknown" value (0, or -1 for experts) is not checked.
// Part of the layout core: standard library only.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "layout/spec.h"

namespace partrain {

struct ModelShape {
  int hidden = 0;     // hidden size; 0 = unknown. Default: 0
  int heads = 0;      // attention heads; 0 = unknown. Default: 0
  int kv_heads = 0;   // key/value heads (GQA groups); 0 = same as heads. Default: 0
  int layers = 0;     // transformer layers; 0 = unknown. Default: 0
  int experts = -1;   // experts per MoE layer; 0 = dense model, -1 = unknown. Default: -1
  int vocab = 0;      // vocabulary size (padded to a multiple of tp, never refused). Default: 0
  int seq_len = 0;    // tokens per sequence; 0 = unknown. Default: 0
};

struct BatchShape {
  int64_t global_batch = 0;  // sequences per optimizer step; 0 = unknown. Default: 0
  int64_t micro_batch = 0;   // sequences per micro-batch per rank; 0 = unknown. Default: 0
};

struct ClusterFacts {
  int world = 0;          // ranks (Slurm tasks). Required
  int gpus_per_node = 0;  // 0 = CPU ranks (no NVLink check). Default: 0
  int nvlink_domain = 0;  // GPUs per NVLink domain; 0 = the whole node. Default: 0
};

// Every violated invariant, in the order listed above (so the same input always gives
// the same list). Empty when the layout is valid.
std::vector<Status> validate_all(const ParallelSpec& spec, const ClusterFacts& cluster,
                                 const ModelShape& model = {}, const BatchShape& batch = {});

// The first violated invariant, or OK.
Status validate(const ParallelSpec& spec, const ClusterFacts& cluster,
                const ModelShape& model = {}, const BatchShape& batch = {});

// grad_accum = global_batch / (micro_batch * dp), the pipeline's micro-batch count;
// an error naming the fix when it is not a positive whole number.
Result<int> derive_grad_accum(const BatchShape& batch, int dp);

}  // namespace partrain
