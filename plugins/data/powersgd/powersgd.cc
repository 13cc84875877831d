// The PowerSGD data-parallel strategy ("powersgd", --partrain=dpN,grad=powersgd): plain
// averaged gradients for the first warm-up steps, then each gradient tensor compressed to a
// rank-r product P Q^T with error feedback and a warm-started Q (low_rank.h: Vogels et al.
// 2019, Algorithm 1). Per compressed step, at grads_done:
//
//   1  every tensor's M = gradient + residual; P = M Q for the compressed ones; all P and
//      the uncompressed tensors' floats in one all-reduce (average)
//   2  P orthonormalized; Q = M^T P; all Q in a second all-reduce (average)
//   3  the gradient becomes P Q^T, the residual M - P Q^T, Q is kept for the next step
//
// The second all-reduce needs the first's result, so nothing overlaps backward.
//
// [plugins.powersgd] in the job file:
//   rank = 4           r, the columns of P and Q; >= 1. Default: 4
//   warmup_steps = 10  uncompressed steps first, counted from the first step this run
//                      trains (after a resume too: see below). Default: 10
//
// What it costs: 4 bytes per parameter of host memory for the residual plus Q (r floats
// per matrix column), two host matrix products and one outer product per tensor and step
// (O(r n) flops), and two all-reduces that cannot overlap backward. What it saves: a rank
// all-reduces r (rows + cols) floats per compressed tensor of rows x cols instead of
// rows x cols (metrics.jsonl dp_bytes), and on a ring both shrink alike, so the wire
// saving is the same ratio at every W.
//
// Checkpoints: the data plugin ABI (v2) has no way to save plugin state, so neither the
// residual nor Q is checkpointed. A resumed run starts with a zero residual, Q from its seed,
// and repeats the warm-up from the step it resumes at: deterministic, but not the
// uninterrupted run's trajectory.
//
// CPU ranks only: it reads and writes gradient values on the host, which GPU ranks'
// device buffers forbid (the host refuses it there, naming this file).
//
// Sees only the SDK headers: builds in tree exactly as out of tree.
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "low_rank.h"
#include "partrain/data_sdk.h"

namespace {

using Clock = std::chrono::steady_clock;
using partrain::sdk::Error;
namespace lr = partrain::powersgd;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct Options {
  size_t rank = 4;
  int64_t warmup_steps = 10;
};

bool whole(double v, double lo) { return v >= lo && v == std::floor(v) && v <= 1e15; }

// [plugins.powersgd]: rank, a whole number >= 1; warmup_steps, a whole number >= 0.
Options parse_options(const char* toml) {
  const auto keys = partrain::sdk::config_numbers(toml, "powersgd", {"rank", "warmup_steps"});
  Options o;
  if (keys.count("rank") != 0) {
    if (!whole(keys.at("rank"), 1) || keys.at("rank") > 1024) {
      throw Error(PARTRAIN_EINVAL, "[plugins.powersgd] rank: need a whole number from 1 to 1024, e.g. 4");
    }
    o.rank = static_cast<size_t>(keys.at("rank"));
  }
  if (keys.count("warmup_steps") != 0) {
    if (!whole(keys.at("warmup_steps"), 0)) {
      throw Error(PARTRAIN_EINVAL, "[plugins.powersgd] warmup_steps: need a whole number of steps, 0 or "
                                   "more, e.g. 10");
    }
    o.warmup_steps = static_cast<int64_t>(keys.at("warmup_steps"));
  }
  return o;
}

class PowerSgd : public partrain::sdk::Strategy {
 public:
  explicit PowerSgd(const partrain_init_args_v2_t& args)
      : comm_(*args.dp), options_(parse_options(args.config_toml)), residual_(args.num_params, 0.0f) {}

  void step_begin(int64_t step) override {
    if (first_step_ < 0) first_step_ = step;
    compress_ = step - first_step_ >= options_.warmup_steps;
    pieces_.clear();
    seen_ = 0;
    stats_ = {};
  }

  void grads_ready(float* data, size_t offset, size_t count, float* /*shard_grads*/) override {
    if (offset > residual_.size() || count > residual_.size() - offset) {
      throw Error(PARTRAIN_EINTERNAL, "powersgd: the host passed range [" + std::to_string(offset) + ", " +
                                          std::to_string(offset + count) + ") of a " +
                                          std::to_string(residual_.size()) + "-element gradient");
    }
    seen_ += count;
    pieces_.push_back({data, offset, count, lr::shape_of(count, options_.rank)});
  }

  void grads_done() override {
    if (seen_ != residual_.size()) {
      throw Error(PARTRAIN_EINTERNAL, "powersgd: the host passed " + std::to_string(seen_) + " of " +
                                          std::to_string(residual_.size()) + " gradient elements this step");
    }
    const Clock::time_point t0 = Clock::now();
    std::vector<float> first = pack_first();
    average(first);
    if (compress_) {
      std::vector<float> second = pack_second(first);
      average(second);
      finish(first, second);
    } else {
      unpack_whole(first);
    }
    const Clock::time_point t1 = Clock::now();
    stats_.comm_ms = ms_between(t0, t1);
    stats_.exposed_ms = stats_.comm_ms;
  }

  void step_end(partrain_sync_stats_v2_t* stats) override {
    if (stats != nullptr) *stats = stats_;
  }

 private:
  struct Piece {
    float* data;
    size_t offset, count;
    lr::Shape shape;
    bool compressed(bool step_compresses) const { return step_compresses && shape.compressed; }
  };

  void average(std::vector<float>& buf) {
    partrain::sdk::wait(comm_, partrain::sdk::start_all_reduce(comm_, buf.data(), buf.size(), PARTRAIN_REDUCE_AVG));
    stats_.bytes += buf.size() * sizeof(float);
    ++stats_.collectives;
  }

  // Step 1: per tensor, P = M Q (compressed) or its floats (the rest, and all at warm-up);
  // M = gradient + residual is left in the residual.
  std::vector<float> pack_first() {
    std::vector<float> out;
    const size_t r = options_.rank;
    for (const Piece& p : pieces_) {
      if (!p.compressed(compress_)) {
        out.insert(out.end(), p.data, p.data + p.count);
        continue;
      }
      float* m = residual_.data() + p.offset;
      for (size_t i = 0; i < p.count; ++i) m[i] += p.data[i];
      std::vector<float>& q = q_of(p);
      const size_t at = out.size();
      out.resize(at + p.shape.rows * r);
      lr::times(m, q.data(), p.shape.rows, p.shape.cols, r, out.data() + at);
    }
    return out;
  }

  // Step 2: the averaged P orthonormalized (in `first`), Q = M^T P.
  std::vector<float> pack_second(std::vector<float>& first) {
    std::vector<float> out;
    const size_t r = options_.rank;
    size_t at = 0;
    for (const Piece& p : pieces_) {
      if (!p.shape.compressed) {
        at += p.count;
        continue;
      }
      float* pm = first.data() + at;
      lr::orthonormalize(pm, p.shape.rows, r);
      const size_t q_at = out.size();
      out.resize(q_at + p.shape.cols * r);
      lr::transposed_times(residual_.data() + p.offset, pm, p.shape.rows, p.shape.cols, r, out.data() + q_at);
      at += p.shape.rows * r;
    }
    return out;
  }

  // Step 3: gradient = P Q^T, residual = M - P Q^T, Q kept; the rest copied back averaged.
  void finish(const std::vector<float>& first, const std::vector<float>& second) {
    const size_t r = options_.rank;
    size_t at = 0, q_at = 0;
    for (const Piece& p : pieces_) {
      if (!p.shape.compressed) {
        std::memcpy(p.data, first.data() + at, p.count * sizeof(float));
        at += p.count;
        continue;
      }
      std::vector<float>& q = q_of(p);
      std::memcpy(q.data(), second.data() + q_at, q.size() * sizeof(float));
      lr::outer(first.data() + at, q.data(), p.shape.rows, p.shape.cols, r, p.data);
      float* m = residual_.data() + p.offset;
      for (size_t i = 0; i < p.count; ++i) m[i] -= p.data[i];
      at += p.shape.rows * r;
      q_at += q.size();
    }
  }

  void unpack_whole(const std::vector<float>& first) {
    size_t at = 0;
    for (const Piece& p : pieces_) {
      std::memcpy(p.data, first.data() + at, p.count * sizeof(float));
      at += p.count;
    }
  }

  // The tensor's Q (cols x r): kept across steps, first drawn from its offset.
  std::vector<float>& q_of(const Piece& p) {
    std::vector<float>& q = q_[p.offset];
    if (q.empty()) {
      q.resize(p.shape.cols * options_.rank);
      lr::initial_q(p.offset, p.shape.cols, options_.rank, q.data());
    }
    return q;
  }

  partrain_comm_v2_t comm_;
  Options options_;
  std::vector<float> residual_;          // this rank's compression error, by flat offset
  std::map<size_t, std::vector<float>> q_;  // each compressed tensor's Q, by its offset
  int64_t first_step_ = -1;              // the first step this instance trained
  bool compress_ = false;                // this step is past the warm-up
  std::vector<Piece> pieces_;            // this step's tensors, in the order handed over
  size_t seen_ = 0;
  partrain_sync_stats_v2_t stats_{};
};

}  // namespace

PARTRAIN_STRATEGY_PLUGIN(PowerSgd, "powersgd", PARTRAIN_FAMILY_DATA, "1.0.0", PARTRAIN_CAP_CPU,
                         "data parallel with PowerSGD rank-r compression and error feedback after a warm-up "
                         "(CPU ranks)")
