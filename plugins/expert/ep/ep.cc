// The expert-parallel strategy ("ep", family expert): the communication of a
// mixture-of-experts layer sharded over the ep group (include/partrain/expert.h): the
// dispatch and combine are one all-to-all each with the host's per-rank counts, the gradient
// norm's expert squares one all-reduce on the ep group, and the experts' gradients one
// all-reduce (sum, then the host's scale) on the expert-data-parallel group. Each is waited
// for at once (the next layer needs its rows). The engine decides what goes where; the
// plugin decides how it travels and counts it for the step's statistics.
//
// It never reads or writes a buffer itself, so it takes device memory on GPU ranks
// (PARTRAIN_CAP_CUDA): partrain scales the experts' gradients on the device and passes scale
// 1, which the plugin does not apply (a scale other than 1 is applied on the host, as an
// older partrain on CPU ranks asks).
//
// [plugins.ep] in the job file: no keys yet; any key is refused.
//
// Sees only the SDK headers: builds in tree exactly as out of tree.
#include <chrono>
#include <numeric>

#include "partrain/expert_sdk.h"

namespace {

using Clock = std::chrono::steady_clock;

class ExpertParallel : public partrain::sdk::ExpertStrategy {
 public:
  explicit ExpertParallel(const partrain_expert_init_args_v1_t& args)
      : ep_(*args.ep), a2a_(*args.ep_all_to_all), has_edp_(args.expert_dp != nullptr) {
    partrain::sdk::config_numbers(args.config_toml, "ep", {});  // refuses every key
    if (has_edp_) edp_ = *args.expert_dp;
    if (args.num_experts < 1 || args.num_experts % ep_.size != 0) {
      throw partrain::sdk::Error(PARTRAIN_EINVAL, "ep: " + std::to_string(args.num_experts) +
                                                      " experts do not split over ep" +
                                                      std::to_string(ep_.size) + "; pick an ep dividing them");
    }
  }

  void all_to_all(const float* in, const size_t* send, float* out, const size_t* recv) override {
    const size_t sent = std::accumulate(send, send + ep_.size, size_t{0});
    timed(sent, [&] { partrain::sdk::wait(a2a_, partrain::sdk::start_all_to_allv(a2a_, in, send, out, recv)); });
  }
  void reduce(float* data, size_t count) override {
    timed(count, [&] {
      partrain::sdk::wait(ep_, partrain::sdk::start_all_reduce(ep_, data, count, PARTRAIN_REDUCE_SUM));
    });
  }
  void reduce_expert_grads(float* data, size_t count, float scale) override {
    if (scale != 1.0f) {  // scaled first: the sum stays in range (host memory: CPU ranks only)
      for (size_t i = 0; i < count; ++i) data[i] *= scale;
    }
    if (!has_edp_) return;
    timed(count, [&] {
      partrain::sdk::wait(edp_, partrain::sdk::start_all_reduce(edp_, data, count, PARTRAIN_REDUCE_SUM));
    });
  }
  void step_end(partrain_expert_stats_v1_t* stats) override {
    if (stats != nullptr) *stats = stats_;
    stats_ = {};
  }

 private:
  template <typename Run>
  void timed(size_t sent, Run run) {
    const auto t0 = Clock::now();
    run();
    stats_.comm_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    stats_.bytes += sent * sizeof(float);
    stats_.collectives += 1;
  }

  partrain_comm_v2_t ep_;
  partrain_alltoall_v1_t a2a_;
  bool has_edp_;
  partrain_comm_v2_t edp_{};
  partrain_expert_stats_v1_t stats_{};
};

}  // namespace

PARTRAIN_EXPERT_PLUGIN(ExpertParallel, "ep", "1.0.0", PARTRAIN_CAP_CPU | PARTRAIN_CAP_CUDA,
                       "expert parallel (MoE): all-to-all dispatch and combine on the ep group, "
                       "expert gradients summed over the expert-data-parallel group")
