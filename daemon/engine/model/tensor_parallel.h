// Tensor parallelism inside the engine (Megatron): what a tensor-parallel rank holds and the
// communication its layers need, written as Megatron-core's "regions".
//
// A model built for (rank, size) splits each block by attention heads and MLP columns:
//   column-parallel: q/k/v (GQA: kv_heads % size == 0), c_fc / gate+up: rows [out] split;
//   row-parallel:    attention and MLP output projections: columns [in] split; the partial
//                    outputs are summed (a reduction), then their biases added once;
//   vocabulary-parallel: the token embedding (and a tied or untied head) keeps rows
//                    [r*ceil(V/size), ...) of the vocabulary; the cross-entropy reduces
//                    max, sum-exp and the target logit over the group, never the logits.
// With sequence parallelism (sp) the residual stream, the norms and dropout hold only this
// rank's rows [rank * N/size, (rank+1) * N/size) of the micro-batch's N = B*T tokens (a
// contiguous block of the flattened (batch, sequence) dimension; norms and dropout are per
// token, so any token split computes the same); the reductions become reduce-scatter
// (into the rows) + all-gather (of the rows), and the norms' parameter gradients are summed
// over the group.
//
// The regions (forward / backward), each a pair of conjugate collectives:
//   copy_to_region            identity    / all-reduce     (a column-parallel input, no sp)
//   reduce_from_region        all-reduce  / identity       (a row-parallel output, no sp)
//   gather_from_sequence      all-gather  / reduce-scatter (a column-parallel input, sp)
//   reduce_scatter_to_sequence reduce-scatter / all-gather (a row-parallel output, sp)
// The model calls them through Regions (regions.cc); the collectives come from TensorComm,
// which the worker implements on the tensor plugin. The engine never sees the transport.
#pragma once

#include <cstdint>

#include "engine/backend.h"

namespace partrain::engine::model {

struct TensorOptions {
  int rank = 0;     // this rank's coordinate on the tp axis. Default: 0
  int size = 1;     // tensor-parallel degree; 1 = nothing split. Default: 1
  bool sp = false;  // sequence parallel (norms and dropout on token shards). Default: false
};

// The collectives of the tensor-parallel group. Buffers are the backend's F32 tensors.
// Calls cannot fail here: an implementation keeps its first error (the rest become no-ops)
// and the worker reports it at the step boundary; the buffers stay valid meanwhile.
class TensorComm {
 public:
  virtual ~TensorComm() = default;
  // In place: t becomes the sum (max) over the group.
  virtual void all_reduce_sum(const Tensor& t) = 0;
  virtual void all_reduce_max(const Tensor& t) = 0;
  // full (size * shard.numel() elements) <- every rank's shard in rank order.
  virtual void all_gather(const Tensor& full, const Tensor& shard) = 0;
  // shard <- this rank's block (shard.numel() elements at rank * shard.numel()) of the sum
  // of every rank's full.
  virtual void reduce_scatter(const Tensor& shard, const Tensor& full) = 0;
  // x summed over the group (the gradient norm's squares).
  virtual double sum(double x) = 0;
};

// The four regions on a group (comm may be null only when size == 1: all identities).
// `full` arguments are [N, C] buffers, `rows` this rank's [N/size, C] rows under sp.
class Regions {
 public:
  Regions() = default;
  Regions(TensorComm* comm, const TensorOptions& tp) : comm_(comm), tp_(tp) {}

  // Entering a column-parallel layer: forward returns its [N, C] input: `rows` gathered
  // into `full` under sp, else `rows` itself (already full: copy_to_region).
  Tensor enter_forward(const Tensor& rows, const Tensor& full) const;
  // Its backward: dfull [N, C] (this rank's part of d input) becomes d rows: reduced over
  // the group in place (no sp, returns dfull) or reduce-scattered into drows (sp).
  Tensor enter_backward(const Tensor& dfull, const Tensor& drows) const;
  // Leaving a row-parallel layer: the partial output [N, C] summed over the group, in
  // place (no sp, returns partial) or reduce-scattered into `rows` (sp, returns rows).
  Tensor leave_forward(const Tensor& partial, const Tensor& rows) const;
  // Its backward: d rows becomes the [N, C] gradient of the partial: gathered into dfull
  // (sp), else drows itself.
  Tensor leave_backward(const Tensor& drows, const Tensor& dfull) const;

  bool active() const { return tp_.size > 1; }
  TensorComm* comm() const { return comm_; }

 private:
  TensorComm* comm_ = nullptr;
  TensorOptions tp_;
};

}  // namespace partrain::engine::model
