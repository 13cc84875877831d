// Context parallelism inside the engine (Megatron-core's cp): what a cp rank holds and the
// communication its attention needs.
//
// A model built for ContextOptions{rank, size} holds, of every sequence of T tokens, chunks
// rank and 2 size - 1 - rank of the 2 size chunks (engine/positions.h), T / size rows in
// all, for every tensor of the residual stream, the MLP, the norms and the head: everything
// but attention is per token. Attention needs every earlier position's keys and values:
// the model packs its rows' K and V into one block ([B T/size, 2 KV hd], keys then values
// per row) and hands it to the ContextComm, which brings every cp rank's block to it one at
// a time; the model attends its queries to each (AttentionBlock kernels: causal by
// position) and merges the partial results with their log-sum-exp (online softmax), so no
// rank ever holds the whole sequence's scores. Backward goes the same way: each block's
// key/value gradient goes back to the rank that holds those rows.
//
// What a cp rank computes is its share of one rank's step: the loss of its tokens over the
// micro-batch's token count (the shares sum to the mean), the MoE routing of the whole
// micro-batch (the router logits are gathered over the group, so capacity and token order
// are one rank's), the aux loss on cp rank 0 only. Its gradient is cp times its share,
// so that the data plugin's average over the dp x cp group (the cp ranks hold the same
// weights) is the global batch's gradient: Megatron-core scales the loss by cp likewise.
// Dropout masks, RoPE angles and learned positions follow the global positions.
#pragma once

#include <functional>

#include "engine/backend.h"

namespace partrain::engine::model {

struct ContextOptions {
  int rank = 0;  // this rank's coordinate on the cp axis. Default: 0
  int size = 1;  // context-parallel degree; 1 = whole sequences. Default: 1
};

// The cp group's communication, as the model calls it. Buffers are the backend's F32
// tensors. Calls cannot fail here: an implementation keeps its first error (the rest become
// no-ops) and the worker reports it at the step boundary; the buffers stay valid meanwhile.
class ContextComm {
 public:
  virtual ~ContextComm() = default;
  // Blocks of scratch (each as large as the rank's K/V block) the communication needs in a
  // forward or backward; the model allocates them once (workspace) and passes them in.
  virtual int scratch_blocks() const = 0;
  // Forward: calls attend(source, block) exactly once for every cp rank `source`, block
  // holding that rank's K/V block (`kv` itself for this rank), in an order the
  // implementation chooses (the ring: this rank, then the one before it, ...).
  using Attend = std::function<void(int source, const Tensor& kv)>;
  virtual void forward(const Tensor& kv, const Tensor& scratch, const Attend& attend) = 0;
  // Backward: calls attend_backward(source, block, dblock) once per cp rank, which adds this
  // rank's gradient for that rank's K/V block into dblock; on return dkv (zeroed by the
  // caller) holds the sum over the group of every rank's gradient for this rank's block.
  using AttendBackward = std::function<void(int source, const Tensor& kv, const Tensor& dkv)>;
  virtual void backward(const Tensor& kv, const Tensor& dkv, const Tensor& scratch,
                        const AttendBackward& attend_backward) = 0;
  // full (size x part.numel() elements) <- every rank's part, in cp rank order (the MoE
  // router's logits, so routing sees the whole micro-batch).
  virtual void all_gather(const Tensor& full, const Tensor& part) = 0;
};

}  // namespace partrain::engine::model
