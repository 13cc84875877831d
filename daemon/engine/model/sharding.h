// ZeRO inside the engine: which part of the training state a data-parallel rank keeps only
// as its shard, and what a sharded model asks of the strategy that moves the rest.
//
// The shard is a short list of flat ranges of the parameter buffer (the data plugins choose
// them: one contiguous range of each view, shard_views.h; one range of the buffer itself
// without expert parallelism). The shard buffers (the reduced gradient, stage 3's
// parameters, AdamW's moments) hold the ranges one after the other, in list order. Stage 1
// shards the optimizer state (AdamW runs on the shard only);
// stage 2 also keeps the gradient only as an fp32 shard: each segment's gradient lives in a
// recycled slot while backward writes it and is reduce-scattered into the shard as soon as
// it is final (every micro-batch); stage 3 also keeps the parameters only as a shard: each
// segment is gathered into a slot just before forward or backward uses it.
//
// Segments: the transformer blocks 0..L-1 (block_param_range), the tail L (final norm and
// an untied head) and the embeddings L+1. Slots per stage:
//   stage 2 gradients: two block slots (one in backward, one being reduced) plus the tail
//     and the embeddings (the embeddings' gradient is final only at the end of backward,
//     and a tied head writes it first);
//   stage 3 parameters: prefetch + 1 block slots, plus the tail and the embeddings, which
//     are gathered once per micro-batch (a tied head reads the embeddings at both ends).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/model/params.h"
#include "engine/model/shard_views.h"

namespace partrain::engine::model {

struct ShardOptions {
  int stage = 0;  // 0: nothing sharded (plain dp, one rank); 1, 2, 3: ZeRO stage
  // This rank's shard (stage >= 1): flat ranges of the buffer, stored one after the other
  // in the shard buffers in this order; disjoint, each inside the buffer. Default: none
  std::vector<FlatRange> ranges;
  int prefetch = 1;  // stage 3: blocks gathered ahead of the one in use

  int64_t numel() const;
  // Each range with its first element's place in the shard buffers.
  struct Run {
    int64_t begin = 0, end = 0, at = 0;
  };
  std::vector<Run> runs() const;
};

// What a sharded model needs from its data-parallel strategy (the worker implements it on
// the data plugin). Calls cannot fail here: an implementation keeps its first error and
// reports it through the trainer's hooks; the model's buffers stay valid meanwhile.
class ShardComm {
 public:
  virtual ~ShardComm() = default;
  // Starts reducing (averaging over the group) gradient range [offset, offset + numel) held
  // in `data`; this rank's part of the result is added into `shard_grads` (the shard
  // buffer, laid out as ShardOptions::ranges).
  virtual void reduce_grads(const Tensor& data, int64_t offset, const Tensor& shard_grads) = 0;
  // Returns when no reduction started earlier still reads range [offset, offset + count).
  virtual void release_grads(int64_t offset, int64_t count) = 0;
  // Starts gathering parameter range [offset, offset + dst.numel()) from every rank's shard
  // buffer `shard_params` into dst; wait_params(dst) returns when it is there.
  virtual void gather_params(const Tensor& shard_params, const Tensor& dst, int64_t offset) = 0;
  virtual void wait_params(const Tensor& dst) = 0;
  // x summed over the data-parallel group (the squares of the gradient norm).
  virtual double sum(double x) = 0;
};

// One piece of a shard as a checkpoint addresses it: the part [begin, end) (element offsets
// into the logical tensor, row-major in partrain's layout) of parameter `name` with global
// `shape`, found at `flat_offset` of the flat buffer.
struct ShardPiece {
  std::string name;
  Shape shape;
  int64_t begin = 0, end = 0;
  int64_t flat_offset = 0;
};

// The tensors the flat range [begin, end) covers, in buffer order, each cut to the range.
// A tensor-parallel piece (ParamSpec::pieces) gives one ShardPiece per run of the logical
// tensor it covers (a row-parallel weight: one per row), with the logical shape.
std::vector<ShardPiece> shard_pieces(const ParamTable& table, int64_t begin, int64_t end);

}  // namespace partrain::engine::model
