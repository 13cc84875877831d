// ZeRO (Rajbhandari et al., DeepSpeed) as data plugins: one source built three times, as
// zero1.so, zero2.so and zero3.so (PARTRAIN_ZERO_STAGE). The plugin chooses each rank's
// shard and moves the data; the host keeps the memory and runs AdamW on the shard.
//
// Partition (balanced, contiguous): with n parameters on D ranks, q = n / D, e = n % D, rank
// r owns [r q + min(r, e), (r + 1) q + min(r + 1, e)): the first e ranks one element more.
// Every tensor is cut where the boundaries fall; the host maps the pieces to names.
//
// Gradients: each finished range the host hands over is reduce-scattered (average) in
// buckets of bucket_mb, launched while backward goes on; this rank's part of the result is
// added into its fp32 gradient shard when the reduce-scatter completes (in grads_release
// or grads_done). Parameters: params_gather all-gathers a range, each rank sending the part
// inside its shard (zero1/2: the whole buffer after the step; zero3: one segment at a time).
//
// GPU ranks (PARTRAIN_HOST_CUDA_BUFFERS): every buffer is device memory the plugin never
// reads or writes; the host stages the shard (PARTRAIN_HOST_SHARD_STAGED), so each bucket is
// reduce-scattered straight into the host's staging area and the host adds it into the
// shard; a gather whose own part lies inside its destination is refused (the host passes a
// copy on GPU ranks).
//
// [plugins.zeroN] in the job file:
//   bucket_mb = 25   gradient reduce-scatter bucket, MiB of float32. Default: 25
//   prefetch = 1     zero3 only: blocks gathered ahead of the one computing. Default: 1
//
// Sees only the SDK headers: builds in tree exactly as out of tree.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "partrain/data_sdk.h"

#ifndef PARTRAIN_ZERO_STAGE
#error "build with -DPARTRAIN_ZERO_STAGE=1, 2 or 3"
#endif

namespace {

constexpr int kStage = PARTRAIN_ZERO_STAGE;
const std::string kName = "zero" + std::to_string(kStage);

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

class Zero : public partrain::sdk::Strategy {
 public:
  Zero(const partrain_init_args_v2_t& args, partrain_data_plan_v2_t* plan)
      : comm_(*args.dp),
        n_(args.num_params),
        device_((args.host_features & PARTRAIN_HOST_CUDA_BUFFERS) != 0),
        staged_((args.host_features & PARTRAIN_HOST_SHARD_STAGED) != 0) {
    const uint64_t need = kStage == 1   ? PARTRAIN_HOST_SHARD_OPTIMIZER
                          : kStage == 2 ? PARTRAIN_HOST_SHARD_OPTIMIZER | PARTRAIN_HOST_SHARD_GRADS
                                        : PARTRAIN_HOST_SHARD_OPTIMIZER | PARTRAIN_HOST_SHARD_GRADS |
                                              PARTRAIN_HOST_SHARD_PARAMS;
    if ((args.host_features & need) != need) {
      throw partrain::sdk::Error(PARTRAIN_EINVAL, kName + ": this partrain cannot keep the state "
                                 "ZeRO stage " + std::to_string(kStage) + " shards; use dp or a lower stage");
    }
    if (device_ && !staged_) {
      throw partrain::sdk::Error(PARTRAIN_EINVAL, kName + ": this partrain hands device buffers without a staged "
                                 "gradient shard (PARTRAIN_HOST_SHARD_STAGED), which " + kName + " needs to add its "
                                 "reduced gradients on the device; use dp on GPUs, or a newer partrain");
    }
    std::vector<std::string> keys{"bucket_mb"};
    if (kStage == 3) keys.push_back("prefetch");
    const auto cfg = partrain::sdk::config_numbers(args.config_toml, kName, keys);
    const double mb = cfg.count("bucket_mb") != 0 ? cfg.at("bucket_mb") : 25.0;
    if (!(mb > 0)) {
      throw partrain::sdk::Error(PARTRAIN_EINVAL, "[plugins." + kName +
                                 "] bucket_mb: need a positive number of MiB, e.g. 25");
    }
    bucket_ = std::max<size_t>(1, static_cast<size_t>(mb * (1 << 20) / sizeof(float)));
    const double prefetch = cfg.count("prefetch") != 0 ? cfg.at("prefetch") : 1.0;
    if (prefetch < 0 || prefetch != static_cast<int>(prefetch) || prefetch > 64) {
      throw partrain::sdk::Error(PARTRAIN_EINVAL, "[plugins." + kName +
                                 "] prefetch: need a whole number of blocks from 0 to 64, e.g. 1");
    }
    if (n_ < static_cast<size_t>(comm_.size)) {
      throw partrain::sdk::Error(PARTRAIN_EINVAL, kName + ": " + std::to_string(n_) +
                                 " parameters cannot be sharded over " + std::to_string(comm_.size) +
                                 " ranks; use dp");
    }
    const size_t d = static_cast<size_t>(comm_.size), q = n_ / d, e = n_ % d;
    for (size_t r = 0; r <= d; ++r) bounds_.push_back(r * q + std::min(r, e));
    begin_ = bounds_[static_cast<size_t>(comm_.rank)];
    end_ = bounds_[static_cast<size_t>(comm_.rank) + 1];
    plan->stage = kStage;
    plan->shard_begin = begin_;
    plan->shard_end = end_;
    plan->prefetch = static_cast<int>(prefetch);
  }

  ~Zero() override {
    // An error left operations in flight: they must finish before their buffers go.
    for (Reduce& r : reduces_) wait_quietly(r.work);
    for (Gather& g : gathers_) wait_quietly(g.work);
  }

  void step_begin(int64_t /*step*/) override {
    stats_ = {};
    started_ = false;
    seen_ = 0;
  }

  void grads_ready(float* data, size_t offset, size_t count, float* shard) override {
    if (shard == nullptr) throw partrain::sdk::Error(PARTRAIN_EINTERNAL, kName + ": no gradient shard");
    seen_ += count;
    // Ranges arrive back to front; one adjacent in memory and in the buffer grows the bucket.
    if (hi_ > lo_ && (offset + count != lo_ || data + count != data_ || shard != shard_)) launch();
    if (hi_ == lo_) hi_ = offset + count;
    lo_ = offset;
    data_ = data;
    shard_ = shard;
    if (hi_ - lo_ >= bucket_) launch();
  }

  void grads_release(size_t offset, size_t count) override {
    if (hi_ > lo_ && lo_ < offset + count && offset < hi_) launch();
    size_t last = 0;  // reductions run in order: wait through the last one overlapping
    for (size_t i = 0; i < reduces_.size(); ++i) {
      if (reduces_[i].lo < offset + count && offset < reduces_[i].hi) last = i + 1;
    }
    const Clock::time_point t0 = Clock::now();
    for (size_t i = 0; i < last; ++i) finish_front();
    stats_.exposed_ms += ms_between(t0, Clock::now());
  }

  void grads_done() override {
    if (hi_ > lo_) launch();
    const Clock::time_point t0 = Clock::now();
    while (!reduces_.empty()) finish_front();
    stats_.exposed_ms += ms_between(t0, Clock::now());
    if (seen_ == 0 || seen_ % n_ != 0) {
      throw partrain::sdk::Error(PARTRAIN_EINTERNAL, kName + ": the host passed " + std::to_string(seen_) +
                                 " gradient elements this step, not a multiple of " + std::to_string(n_));
    }
  }

  void params_gather(const float* shard, float* dst, size_t offset, size_t count) override {
    if (offset + count > n_) throw partrain::sdk::Error(PARTRAIN_EINTERNAL, kName + ": gather past the buffer");
    const std::vector<size_t> counts = parts(offset, offset + count);
    Gather g;
    g.dst = dst;
    const size_t mine = counts[static_cast<size_t>(comm_.rank)];
    const float* in = shard + (std::max(offset, begin_) - begin_);
    // In place (the shard inside dst, zero1/2 after the step): send from a copy.
    if (mine > 0 && in < dst + count && dst < in + mine) {
      if (device_) {
        throw partrain::sdk::Error(PARTRAIN_EINTERNAL, kName + ": a gather from a shard inside its destination "
                                   "on device buffers; the host must pass a copy of the shard");
      }
      g.copy.assign(in, in + mine);
      in = g.copy.data();
    }
    note_start();
    g.work = partrain::sdk::start_all_gather(comm_, in, dst, counts);
    stats_.bytes += mine * sizeof(float);
    ++stats_.collectives;
    gathers_.push_back(std::move(g));
  }

  void params_wait(float* dst) override {
    auto it = std::find_if(gathers_.begin(), gathers_.end(), [&](const Gather& g) { return g.dst == dst; });
    if (it == gathers_.end()) throw partrain::sdk::Error(PARTRAIN_EINTERNAL, kName + ": no gather into that buffer");
    const Clock::time_point t0 = Clock::now();
    // Out of the list first (a failed wait must not be waited again), but alive until the
    // wait returns: the collective may still read its copy.
    const Gather g = std::move(*it);
    gathers_.erase(it);
    partrain::sdk::wait(comm_, g.work);
    last_finish_ = Clock::now();
    stats_.exposed_ms += ms_between(t0, last_finish_);
  }

  void step_end(partrain_sync_stats_v2_t* stats) override {
    stats_.comm_ms = started_ ? ms_between(first_start_, last_finish_) : 0.0;
    *stats = stats_;
  }

 private:
  struct Reduce {
    size_t lo = 0, hi = 0;
    void* work = nullptr;
    std::vector<float> out;  // this rank's part of the reduced bucket (host buffers)
    float* add_to = nullptr; // where it goes in the gradient shard (staged: written there)
  };
  struct Gather {
    float* dst = nullptr;
    void* work = nullptr;
    std::vector<float> copy;  // the rank's own part when it lies inside dst
  };

  // Elements of [lo, hi) in each rank's shard.
  std::vector<size_t> parts(size_t lo, size_t hi) const {
    std::vector<size_t> c(static_cast<size_t>(comm_.size), 0);
    for (size_t r = 0; r < c.size(); ++r) {
      const size_t a = std::max(lo, bounds_[r]), b = std::min(hi, bounds_[r + 1]);
      c[r] = b > a ? b - a : 0;
    }
    return c;
  }

  void note_start() {
    if (started_) return;
    started_ = true;
    first_start_ = Clock::now();
  }

  void launch() {
    Reduce r;
    r.lo = lo_;
    r.hi = hi_;
    const std::vector<size_t> counts = parts(lo_, hi_);
    const size_t mine = counts[static_cast<size_t>(comm_.rank)];
    r.add_to = mine > 0 ? shard_ + (std::max(lo_, begin_) - begin_) : nullptr;
    float* out = r.add_to;  // staged: straight into the host's staging area
    if (!staged_) {
      r.out.resize(std::max<size_t>(1, mine));
      out = r.out.data();
    }
    note_start();
    r.work = partrain::sdk::start_reduce_scatter(comm_, data_, out, counts, PARTRAIN_REDUCE_AVG);
    stats_.bytes += (hi_ - lo_) * sizeof(float);
    ++stats_.collectives;
    reduces_.push_back(std::move(r));
    lo_ = hi_ = 0;
  }

  // Waits for the oldest reduction and adds its result into the gradient shard (staged: the
  // host adds it).
  void finish_front() {
    Reduce r = std::move(reduces_.front());
    reduces_.pop_front();
    partrain::sdk::wait(comm_, r.work);
    last_finish_ = Clock::now();
    if (staged_) return;
    const size_t a = std::max(r.lo, begin_), b = std::min(r.hi, end_);
    for (size_t i = 0; a + i < b; ++i) r.add_to[i] += r.out[i];
  }

  void wait_quietly(void* work) noexcept {
    char err[256];
    if (work != nullptr) comm_.wait(comm_.ctx, work, err, sizeof err);
  }

  partrain_comm_v2_t comm_;
  size_t n_;
  bool device_;  // buffers are device memory: never read or written here
  bool staged_;  // the host stages the gradient shard: results are written, not added
  size_t bucket_ = 0;
  std::vector<size_t> bounds_;  // shard r is [bounds_[r], bounds_[r + 1])
  size_t begin_ = 0, end_ = 0;
  // The open bucket [lo_, hi_), data_ at element lo_, for shard shard_.
  size_t lo_ = 0, hi_ = 0;
  float* data_ = nullptr;
  float* shard_ = nullptr;
  std::deque<Reduce> reduces_;
  std::deque<Gather> gathers_;
  size_t seen_ = 0;
  bool started_ = false;
  Clock::time_point first_start_, last_finish_;
  partrain_sync_stats_v2_t stats_{};
};

}  // namespace

#if PARTRAIN_ZERO_STAGE == 1
PARTRAIN_STRATEGY_PLUGIN(Zero, "zero1", PARTRAIN_FAMILY_DATA, "1.0.0",
                         PARTRAIN_CAP_CPU | PARTRAIN_CAP_CUDA | PARTRAIN_CAP_OVERLAP | PARTRAIN_CAP_SHARDED_STATE,
                         "ZeRO-1: optimizer state sharded; gradient reduce-scatter, parameter all-gather")
#elif PARTRAIN_ZERO_STAGE == 2
PARTRAIN_STRATEGY_PLUGIN(Zero, "zero2", PARTRAIN_FAMILY_DATA, "1.0.0",
                         PARTRAIN_CAP_CPU | PARTRAIN_CAP_CUDA | PARTRAIN_CAP_OVERLAP | PARTRAIN_CAP_SHARDED_STATE,
                         "ZeRO-2: optimizer state and gradients sharded, reduce-scattered per block")
#else
PARTRAIN_STRATEGY_PLUGIN(Zero, "zero3", PARTRAIN_FAMILY_DATA, "1.0.0",
                         PARTRAIN_CAP_CPU | PARTRAIN_CAP_CUDA | PARTRAIN_CAP_OVERLAP | PARTRAIN_CAP_SHARDED_STATE,
                         "ZeRO-3: parameters sharded too, gathered per block with prefetch")
#endif
