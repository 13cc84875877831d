// The all-gather context-parallel strategy ("allgather", family context; as Llama 3 trained
// its long-context stage): every rank all-gathers the cp group's K/V blocks at once, then
// the host attends to each; backward gathers them again, the host leaves each block's
// gradient in its own scratch block, and one reduce-scatter sums every block's gradient on
// the rank that holds it. Nothing overlaps, but with grouped-query attention the K/V
// blocks are small (kv_heads of the heads), and two collectives replace 2(cp - 1) hops.
//
// The host attends to the blocks in the ring's order (rank r, r - 1, ...), so the merged
// forward is the ring plugin's bit for bit. Scratch: cp K/V blocks and cp gradient blocks.
//
// [plugins.allgather] in the job file: no keys yet; any key is refused.
//
// Sees only the SDK headers: builds in tree exactly as out of tree.
#include <chrono>
#include <vector>

#include "partrain/context_sdk.h"

namespace {

using Clock = std::chrono::steady_clock;

class AllGather : public partrain::sdk::ContextStrategy {
 public:
  explicit AllGather(const partrain_context_init_args_v1_t& args) : comm_(*args.cp) {
    partrain::sdk::config_numbers(args.config_toml, "allgather", {});  // refuses every key
    P_ = comm_.size;
    r_ = comm_.rank;
  }

  size_t scratch_blocks() override { return 2 * static_cast<size_t>(P_); }

  void forward(const partrain::sdk::Blocks& b) override {
    gather(b.kv(), b.scratch(0), b.count());
    for (int i = 0; i < P_; ++i) {
      const int s = (r_ - i + P_) % P_;
      b.attend(s, b.scratch(static_cast<size_t>(s)));
    }
  }

  void backward(const partrain::sdk::Blocks& b) override {
    gather(b.kv(), b.scratch(0), b.count());
    for (int i = 0; i < P_; ++i) {
      const int s = (r_ - i + P_) % P_;
      float* grad = b.scratch(static_cast<size_t>(P_ + s));
      b.zero(grad);
      b.attend_backward(s, b.scratch(static_cast<size_t>(s)), grad);
    }
    // Block s's gradient from every rank, summed on rank s.
    std::vector<size_t> counts(static_cast<size_t>(P_), b.count());
    timed(b.count() * static_cast<size_t>(P_), [&] {
      partrain::sdk::wait(comm_, partrain::sdk::start_reduce_scatter(comm_, b.scratch(static_cast<size_t>(P_)), b.dkv(),
                                                                     counts, PARTRAIN_REDUCE_SUM));
    });
  }

  void gather(const float* part, float* full, size_t count) override {
    std::vector<size_t> counts(static_cast<size_t>(P_), count);
    timed(count, [&] { partrain::sdk::wait(comm_, partrain::sdk::start_all_gather(comm_, part, full, counts)); });
  }

  void step_end(partrain_context_stats_v1_t* stats) override {
    if (stats != nullptr) *stats = stats_;
    stats_ = {};
  }

 private:
  // A blocking collective: all of its time is exposed.
  template <typename Run>
  void timed(size_t sent, Run run) {
    const Clock::time_point t0 = Clock::now();
    run();
    const double took = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    stats_.comm_ms += took;
    stats_.exposed_ms += took;
    stats_.bytes += sent * sizeof(float);
    stats_.collectives += 1;
  }

  partrain_comm_v2_t comm_;
  int P_ = 1, r_ = 0;
  partrain_context_stats_v1_t stats_{};
};

}  // namespace

PARTRAIN_CONTEXT_PLUGIN(AllGather, "allgather", "1.0.0", PARTRAIN_CAP_CPU,
                        "context parallel, all-gather: every rank gathers the cp group's K/V blocks, "
                        "gradients reduce-scattered back (Llama 3)")
