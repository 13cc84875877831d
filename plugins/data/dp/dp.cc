// The data-parallel strategy ("dp"): averages the gradient over the data-parallel group
// once per optimizer step, in buckets launched as soon as backward hands over enough
// finished gradient, so communication of late layers overlaps the rest of backward.
//
// [plugins.dp] in the job file:
//   bucket_mb = 25     bucket size in MiB of float32 gradient. Default: 25 (as PyTorch DDP)
//
// GPU ranks (PARTRAIN_HOST_CUDA_BUFFERS): the gradient is device memory; this plugin only
// passes pointers to the communicator (NCCL) and never touches the values, so it serves CPU
// and GPU ranks alike.
//
// Sees only the SDK headers: builds in tree exactly as out of tree.
#include <chrono>
#include <string>
#include <vector>

#include "partrain/data_sdk.h"

namespace {

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// [plugins.dp]: bucket_mb, a positive number of MiB.
double parse_bucket_mb(const char* toml) {
  const auto keys = partrain::sdk::config_numbers(toml, "dp", {"bucket_mb"});
  const double mb = keys.count("bucket_mb") != 0 ? keys.at("bucket_mb") : 25.0;
  if (!(mb > 0)) {
    throw partrain::sdk::Error(PARTRAIN_EINVAL,
                               "[plugins.dp] bucket_mb: need a positive number of MiB, e.g. 25");
  }
  return mb;
}

class DataParallel : public partrain::sdk::Strategy {
 public:
  explicit DataParallel(const partrain_init_args_v2_t& args)
      : comm_(*args.dp), num_grads_(args.num_params) {
    const double mb = parse_bucket_mb(args.config_toml);
    bucket_elems_ = static_cast<size_t>(mb * (1 << 20) / sizeof(float));
    if (bucket_elems_ == 0) bucket_elems_ = 1;
  }

  void step_begin(int64_t /*step*/) override {
    works_.clear();
    seen_ = 0;
    lo_ = hi_ = 0;
    base_ = nullptr;
    stats_ = {};
    started_ = false;
  }

  // Ranges arrive back to front; adjacent ones grow the open bucket, which is launched
  // once it holds bucket_elems_. Stage 0: data is the gradient itself, averaged in place.
  void grads_ready(float* data, size_t offset, size_t count, float* /*shard_grads*/) override {
    seen_ += count;
    // data[0] is element `offset`: the buffer's start, for the bucket arithmetic.
    float* grads = data - offset;
    if (hi_ > lo_ && (offset + count != lo_ || grads != base_)) launch();
    base_ = grads;
    if (hi_ == lo_) hi_ = offset + count;
    lo_ = offset;
    if (hi_ - lo_ >= bucket_elems_) launch();
  }

  void grads_done() override {
    if (hi_ > lo_) launch();
    const Clock::time_point t0 = Clock::now();
    for (void* w : works_) partrain::sdk::wait(comm_, w);
    const Clock::time_point t1 = Clock::now();
    works_.clear();
    if (seen_ != num_grads_) {
      throw partrain::sdk::Error(PARTRAIN_EINTERNAL,
                                 "dp: the host passed " + std::to_string(seen_) + " of " +
                                     std::to_string(num_grads_) + " gradient elements this step");
    }
    stats_.exposed_ms = ms_between(t0, t1);
    stats_.comm_ms = started_ ? ms_between(first_launch_, t1) : 0.0;
  }

  void step_end(partrain_sync_stats_v2_t* stats) override {
    if (stats != nullptr) *stats = stats_;
  }

 private:
  void launch() {
    if (!started_) {
      started_ = true;
      first_launch_ = Clock::now();
    }
    works_.push_back(
        partrain::sdk::start_all_reduce(comm_, base_ + lo_, hi_ - lo_, PARTRAIN_REDUCE_AVG));
    stats_.bytes += (hi_ - lo_) * sizeof(float);
    ++stats_.collectives;
    lo_ = hi_ = 0;
  }

  partrain_comm_v2_t comm_;
  size_t num_grads_;
  float* base_ = nullptr;  // the gradient buffer's start
  size_t bucket_elems_ = 0;
  std::vector<void*> works_;
  size_t seen_ = 0;
  size_t lo_ = 0, hi_ = 0;  // the open bucket [lo_, hi_)
  bool started_ = false;
  Clock::time_point first_launch_;
  partrain_sync_stats_v2_t stats_{};
};

}  // namespace

PARTRAIN_STRATEGY_PLUGIN(DataParallel, "dp", PARTRAIN_FAMILY_DATA, "1.0.0",
                         PARTRAIN_CAP_CPU | PARTRAIN_CAP_CUDA | PARTRAIN_CAP_OVERLAP,
                         "data parallel: bucketed gradient all-reduce (average) once per step")
