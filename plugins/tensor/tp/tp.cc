// The tensor-parallel strategy ("tp", family tensor): the communication of Megatron's
// regions (include/partrain/tensor.h) on the host's tensor-parallel group: reduce is one
// all-reduce, gather one all-gather, scatter one reduce-scatter, each waited for at once
// (the next layer needs its result). The engine decides where the regions are; the plugin
// decides how their collectives run and counts them for the step's statistics.
//
// [plugins.tp] in the job file: no keys yet; any key is refused.
//
// Sees only the SDK headers: builds in tree exactly as out of tree.
#include <chrono>
#include <vector>

#include "partrain/tensor_sdk.h"

namespace {

using Clock = std::chrono::steady_clock;

class TensorParallel : public partrain::sdk::TensorStrategy {
 public:
  explicit TensorParallel(const partrain_tensor_init_args_v1_t& args) : comm_(*args.tp) {
    partrain::sdk::config_numbers(args.config_toml, "tp", {});  // refuses every key
    counts_.assign(static_cast<size_t>(comm_.size), 0);
  }

  void reduce(float* data, size_t count, int op) override {
    if (op != PARTRAIN_REDUCE_SUM && op != PARTRAIN_REDUCE_MAX) {
      throw partrain::sdk::Error(PARTRAIN_EINVAL, "tp: reduce takes SUM or MAX");
    }
    timed(count, [&] { return partrain::sdk::start_all_reduce(comm_, data, count, op); });
  }
  void gather(const float* rows, float* full, size_t count) override {
    counts_.assign(counts_.size(), count);
    timed(count, [&] { return partrain::sdk::start_all_gather(comm_, rows, full, counts_); });
  }
  void scatter(const float* full, float* rows, size_t count) override {
    counts_.assign(counts_.size(), count);
    timed(count * counts_.size(), [&] {
      return partrain::sdk::start_reduce_scatter(comm_, full, rows, counts_, PARTRAIN_REDUCE_SUM);
    });
  }
  void step_end(partrain_tensor_stats_v1_t* stats) override {
    if (stats != nullptr) *stats = stats_;
    stats_ = {};
  }

 private:
  template <typename Start>
  void timed(size_t sent, Start start) {
    const auto t0 = Clock::now();
    partrain::sdk::wait(comm_, start());
    stats_.comm_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    stats_.bytes += sent * sizeof(float);
    stats_.collectives += 1;
  }

  partrain_comm_v2_t comm_;
  std::vector<size_t> counts_;
  partrain_tensor_stats_v1_t stats_{};
};

}  // namespace

PARTRAIN_TENSOR_PLUGIN(TensorParallel, "tp", "1.0.0", PARTRAIN_CAP_CPU | PARTRAIN_CAP_CUDA,
                       "tensor parallel (Megatron regions; sp or nosp): all-reduce, all-gather "
                       "and reduce-scatter on the tp group")
