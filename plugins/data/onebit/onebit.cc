// The 1-bit data-parallel strategy ("onebit", --partrain=dpN,grad=onebit): plain averaged
// gradients for the first warm-up steps, then every gradient tensor (or chunk of one) sent
// as its signs and one scale with error feedback (sign_codec.h: Seide et al. 1-bit SGD, 1-bit
// Adam's compressor), so a step moves 1 + ceil(n / 32) words per tensor of n elements
// instead of n floats. Unlike 1-bit Adam, which compresses the momentum with the variance
// frozen, this compresses the gradient before the host's AdamW: the sign's uniform
// magnitude reaches AdamW's per-element normalisation, which costs loss (plugins/README.md).
//
// Per step, each bucket (tensors handed over until they hold bucket_mb of gradient):
//   warm-up     the bucket's floats copied together and all-reduced (average), as dp does
//   compressed  each tensor compressed with this rank's residual, the bucket's words
//               all-gathered, and every rank's q added up in rank order and divided by the
//               group size, so every rank computes the same average bit for bit
// The host's communicator moves float32 only; an all-gather copies its elements without
// computing on them, so the packed words travel as float32 bit patterns unchanged.
//
// [plugins.onebit] in the job file:
//   warmup_steps = 10  uncompressed steps first, counted from the first step this run
//                      trains (after a resume too: see below). Default: 10
//   chunk = 0          elements sharing one scale; 0: each tensor has one. Default: 0.
//                      A chunk of k costs one more word per k elements (k = 32: 16x fewer
//                      bytes than dp instead of ~32x) and keeps the scale closer to each
//                      element's magnitude, which AdamW, normalising per element, needs
//                      (tiny example, dp4, step 200: 2.9% above dp's loss instead of 17.9%)
//   bucket_mb = 25     MiB of float32 gradient per collective. Default: 25 (as dp)
//
// What it costs: 4 bytes per parameter of host memory for the residual, and host passes over
// the gradient: one in backward (compress), W after the gather (decode). What it saves: a
// rank puts 1 + ceil(n / 32) words per tensor into the step's collectives instead of n
// floats (metrics.jsonl dp_bytes, ~32x less). On a ring, dp's all-reduce sends 2 (W-1)/W x
// 4n bytes per rank and this all-gather (W-1) x 4m (m words), so the wire saving is
// ~64/W: 32x at dp2, 16x at dp4, none at dp64 (1-bit Adam's compressed all-reduce keeps
// 32x with an all-to-all, which the data family's communicator does not offer).
//
// Checkpoints: the data plugin ABI (v2) has no way to save plugin state, so the residual is
// not checkpointed. A resumed run starts with a zero residual and repeats the warm-up from
// the step it resumes at: deterministic, but not the uninterrupted run's trajectory.
//
// CPU ranks only: it reads and writes gradient values on the host, which GPU ranks'
// device buffers forbid (the host refuses it there, naming this file).
//
// Sees only the SDK headers: builds in tree exactly as out of tree.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "partrain/data_sdk.h"
#include "sign_codec.h"

namespace {

using Clock = std::chrono::steady_clock;
using partrain::sdk::Error;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct Options {
  int64_t warmup_steps = 10;
  size_t chunk = 0;  // elements per scale; 0: the whole tensor
  double bucket_mb = 25;
};

// [plugins.onebit]: warmup_steps, a whole number >= 0; bucket_mb, a positive number of MiB.
Options parse_options(const char* toml) {
  const auto keys = partrain::sdk::config_numbers(toml, "onebit", {"warmup_steps", "chunk", "bucket_mb"});
  Options o;
  if (keys.count("warmup_steps") != 0) {
    const double w = keys.at("warmup_steps");
    if (!(w >= 0) || w != std::floor(w) || w > 1e15) {
      throw Error(PARTRAIN_EINVAL, "[plugins.onebit] warmup_steps: need a whole number of steps, 0 or "
                                   "more, e.g. 10");
    }
    o.warmup_steps = static_cast<int64_t>(w);
  }
  if (keys.count("chunk") != 0) {
    const double c = keys.at("chunk");
    if (!(c >= 0) || c != std::floor(c) || c > 1e15) {
      throw Error(PARTRAIN_EINVAL, "[plugins.onebit] chunk: need a whole number of elements per scale, 0 (the "
                                   "whole tensor) or more, e.g. 32");
    }
    o.chunk = static_cast<size_t>(c);
  }
  if (keys.count("bucket_mb") != 0) o.bucket_mb = keys.at("bucket_mb");
  if (!(o.bucket_mb > 0)) {
    throw Error(PARTRAIN_EINVAL, "[plugins.onebit] bucket_mb: need a positive number of MiB, e.g. 25");
  }
  return o;
}

// Tensors sent in one collective, and its buffers. Warm-up: `send` holds the tensors' floats
// (as bits) and is all-reduced in place. Compressed: `send` holds, per tensor, its scale
// word and its sign words; `recv` every rank's `send`, in rank order.
struct Bucket {
  struct Piece {
    float* data;
    size_t count;
  };
  std::vector<Piece> pieces;
  size_t elements = 0;
  std::vector<uint32_t> send, recv;
  void* work = nullptr;
};

class OneBit : public partrain::sdk::Strategy {
 public:
  explicit OneBit(const partrain_init_args_v2_t& args)
      : comm_(*args.dp), options_(parse_options(args.config_toml)), residual_(args.num_params, 0.0f) {
    bucket_elems_ = static_cast<size_t>(options_.bucket_mb * (1 << 20) / sizeof(float));
    if (bucket_elems_ == 0) bucket_elems_ = 1;
  }

  void step_begin(int64_t step) override {
    if (first_step_ < 0) first_step_ = step;
    compress_ = step - first_step_ >= options_.warmup_steps;
    buckets_.clear();
    buckets_.emplace_back();
    seen_ = 0;
    stats_ = {};
    started_ = false;
  }

  void grads_ready(float* data, size_t offset, size_t count, float* /*shard_grads*/) override {
    if (offset > residual_.size() || count > residual_.size() - offset) {
      throw Error(PARTRAIN_EINTERNAL, "onebit: the host passed range [" + std::to_string(offset) + ", " +
                                          std::to_string(offset + count) + ") of a " +
                                          std::to_string(residual_.size()) + "-element gradient");
    }
    seen_ += count;
    Bucket& b = buckets_.back();
    b.pieces.push_back({data, count});
    b.elements += count;
    if (compress_) {
      for (size_t lo = 0; lo < count; lo += chunk(count)) {  // each chunk: its scale, its signs
        const size_t n = std::min(chunk(count), count - lo), at = b.send.size();
        b.send.resize(at + 1 + partrain::onebit::sign_words(n));
        const float s = partrain::onebit::compress(data + lo, residual_.data() + offset + lo, n, b.send.data() + at + 1);
        std::memcpy(&b.send[at], &s, sizeof s);
      }
    } else {
      const size_t at = b.send.size();
      b.send.resize(at + count);
      std::memcpy(b.send.data() + at, data, count * sizeof(float));
    }
    if (b.elements >= bucket_elems_) launch();
  }

  void grads_done() override {
    if (buckets_.back().elements > 0) launch();
    const Clock::time_point t0 = Clock::now();
    for (Bucket& b : buckets_) {
      if (b.work == nullptr) continue;
      partrain::sdk::wait(comm_, b.work);
      b.work = nullptr;
      compress_ ? decode(b) : copy_back(b);
    }
    const Clock::time_point t1 = Clock::now();
    if (seen_ != residual_.size()) {
      throw Error(PARTRAIN_EINTERNAL, "onebit: the host passed " + std::to_string(seen_) + " of " +
                                          std::to_string(residual_.size()) + " gradient elements this step");
    }
    stats_.exposed_ms = ms_between(t0, t1);
    stats_.comm_ms = started_ ? ms_between(first_launch_, t1) : 0.0;
  }

  void step_end(partrain_sync_stats_v2_t* stats) override {
    if (stats != nullptr) *stats = stats_;
  }

 private:
  // The words travel as float32 bit patterns (an all-reduce of warm-up floats, an all-gather
  // of packed words, which it only copies).
  static float* as_floats(std::vector<uint32_t>& v) { return reinterpret_cast<float*>(v.data()); }

  void launch() {
    if (!started_) {
      started_ = true;
      first_launch_ = Clock::now();
    }
    Bucket& b = buckets_.back();
    if (compress_) {
      b.recv.resize(b.send.size() * static_cast<size_t>(comm_.size));
      const std::vector<size_t> counts(static_cast<size_t>(comm_.size), b.send.size());
      b.work = partrain::sdk::start_all_gather(comm_, as_floats(b.send), as_floats(b.recv), counts);
    } else {
      b.work = partrain::sdk::start_all_reduce(comm_, as_floats(b.send), b.send.size(), PARTRAIN_REDUCE_AVG);
    }
    stats_.bytes += b.send.size() * sizeof(uint32_t);
    ++stats_.collectives;
    buckets_.emplace_back();
  }

  // Warm-up: the averaged floats back into the host's tensors.
  static void copy_back(Bucket& b) {
    const float* at = as_floats(b.send);
    for (const Bucket::Piece& p : b.pieces) {
      std::memcpy(p.data, at, p.count * sizeof(float));
      at += p.count;
    }
  }

  // Elements sharing one scale in a tensor of n.
  size_t chunk(size_t n) const { return options_.chunk > 0 ? options_.chunk : std::max<size_t>(n, 1); }

  // Compressed: each chunk becomes the mean over ranks of their decompressed q, added in
  // rank order (the same sum on every rank).
  void decode(Bucket& b) const {
    const size_t stride = b.send.size();
    size_t at = 0;
    for (const Bucket::Piece& p : b.pieces) {
      std::fill(p.data, p.data + p.count, 0.0f);
      for (size_t lo = 0; lo < p.count; lo += chunk(p.count)) {
        const size_t n = std::min(chunk(p.count), p.count - lo);
        for (size_t r = 0; r < static_cast<size_t>(comm_.size); ++r) {
          const uint32_t* block = b.recv.data() + r * stride + at;
          float s = 0;
          std::memcpy(&s, block, sizeof s);
          partrain::onebit::add_decompressed(block + 1, s, n, p.data + lo);
        }
        at += 1 + partrain::onebit::sign_words(n);
      }
      const float w = static_cast<float>(comm_.size);
      for (size_t i = 0; i < p.count; ++i) p.data[i] /= w;
    }
  }

  partrain_comm_v2_t comm_;
  Options options_;
  std::vector<float> residual_;  // this rank's compression error, by flat gradient offset
  size_t bucket_elems_ = 0;
  int64_t first_step_ = -1;      // the first step this instance trained
  bool compress_ = false;        // this step is past the warm-up
  std::vector<Bucket> buckets_;  // this step's; the last one is open
  size_t seen_ = 0;
  bool started_ = false;
  Clock::time_point first_launch_;
  partrain_sync_stats_v2_t stats_{};
};

}  // namespace

PARTRAIN_STRATEGY_PLUGIN(OneBit, "onebit", PARTRAIN_FAMILY_DATA, "1.0.0", PARTRAIN_CAP_CPU | PARTRAIN_CAP_OVERLAP,
                         "data parallel with 1-bit sign compression and error feedback after a warm-up "
                         "(CPU ranks)")
