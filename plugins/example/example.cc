// A complete data-family strategy plugin, "example": averages the whole gradient with one
// all-reduce per optimizer step (no buckets). Copy this folder, rename, build against an
// installed partrain (see README.md) and drop the .so into the plugin directory.
#include <chrono>
#include <string>

#include "partrain/data_sdk.h"

namespace {

class ExampleSync : public partrain::sdk::Strategy {
 public:
  // args.dp is the data-parallel communicator; args.config_toml the job's [plugins.example].
  explicit ExampleSync(const partrain_init_args_v2_t& args) : comm_(*args.dp) {}

  void step_begin(int64_t /*step*/) override { seen_ = 0; }

  // The host hands over finished gradient ranges; this plugin waits for all of them.
  // data[0] is element `offset`; the lowest range (offset 0) starts the buffer.
  void grads_ready(float* data, size_t offset, size_t count, float* /*shard*/) override {
    seen_ += count;
    if (offset == 0) grads_ = data;
  }

  // Everything is final: one all-reduce (average) over the whole buffer.
  void grads_done() override {
    float* grads = grads_;
    const auto t0 = std::chrono::steady_clock::now();
    void* work = partrain::sdk::start_all_reduce(comm_, grads, seen_, PARTRAIN_REDUCE_AVG);
    partrain::sdk::wait(comm_, work);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    stats_.comm_ms = ms;
    stats_.exposed_ms = ms;  // nothing overlaps: all of it is exposed
    stats_.bytes = seen_ * sizeof(float);
    stats_.collectives = 1;
  }

  void step_end(partrain_sync_stats_v2_t* stats) override { *stats = stats_; }

 private:
  partrain_comm_v2_t comm_;
  size_t seen_ = 0;
  float* grads_ = nullptr;
  partrain_sync_stats_v2_t stats_{};
};

}  // namespace

PARTRAIN_STRATEGY_PLUGIN(ExampleSync, "example", PARTRAIN_FAMILY_DATA, "0.1.0", PARTRAIN_CAP_CPU,
                         "example: one unbucketed gradient all-reduce per step")
