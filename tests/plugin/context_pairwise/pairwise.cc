// A context-parallel strategy a site could add without rebuilding partrain ("pairwise",
// family context): instead of passing blocks around the ring, step i exchanges this rank's
// own block directly with the ranks i away (send to r + i, receive from r - i), the next
// step's exchange running while the host attends to the block that arrived. Backward
// sends each block's gradient straight home (to r - i), receiving from r + i this rank's
// block's gradient from that rank, added up by the host. Scratch: two blocks in flight
// each way and the arriving gradient.
//
// Built out of tree by tests/plugin/context_out_of_tree.sh against the installed SDK.
#include <vector>

#include "partrain/context_sdk.h"

namespace {

class Pairwise : public partrain::sdk::ContextStrategy {
 public:
  explicit Pairwise(const partrain_context_init_args_v1_t& args) : comm_(*args.cp), p2p_(*args.cp_p2p) {
    partrain::sdk::config_numbers(args.config_toml, "pairwise", {});
    P_ = p2p_.size;
    r_ = p2p_.rank;
  }

  size_t scratch_blocks() override { return 5; }

  void forward(const partrain::sdk::Blocks& b) override {
    void* w = start(b, 1, b.kv(), b.scratch(1));
    b.attend(r_, b.kv());
    for (int i = 1; i < P_; ++i) {
      partrain::sdk::wait(p2p_, w);
      float* arrived = b.scratch(static_cast<size_t>(i % 2));
      w = i + 1 < P_ ? start(b, i + 1, b.kv(), b.scratch(static_cast<size_t>((i + 1) % 2))) : nullptr;
      b.attend((r_ - i + P_) % P_, arrived);
    }
  }

  void backward(const partrain::sdk::Blocks& b) override {
    const size_t n = b.count();
    b.attend_backward(r_, b.kv(), b.dkv());  // this rank's own part of its block
    for (int i = 1; i < P_; ++i) {
      // The block of r - i, fetched again; its gradient goes back to r - i while this
      // rank's block's gradient from r + i arrives.
      float* block = b.scratch(0);
      partrain::sdk::wait(p2p_, start(b, i, b.kv(), block));
      float* grad = b.scratch(2);
      b.zero(grad);
      b.attend_backward((r_ - i + P_) % P_, block, grad);
      const int home = (r_ - i + P_) % P_, from = (r_ + i) % P_;
      partrain::sdk::wait(p2p_, partrain::sdk::start_exchange(p2p_, grad, n, home, b.scratch(4), n, from));
      b.add(b.dkv(), b.scratch(4));
    }
  }

  void gather(const float* part, float* full, size_t count) override {
    std::vector<size_t> counts(static_cast<size_t>(P_), count);
    partrain::sdk::wait(comm_, partrain::sdk::start_all_gather(comm_, part, full, counts));
  }

 private:
  // Step i's exchange: this rank's block to r + i, r - i's block into `into`.
  void* start(const partrain::sdk::Blocks& b, int i, const float* own, float* into) {
    return partrain::sdk::start_exchange(p2p_, own, b.count(), (r_ + i) % P_, into, b.count(), (r_ - i + P_) % P_);
  }

  partrain_comm_v2_t comm_;
  partrain_p2p_v1_t p2p_;
  int P_ = 1, r_ = 0;
};

}  // namespace

PARTRAIN_CONTEXT_PLUGIN(Pairwise, "pairwise", "0.1.0", PARTRAIN_CAP_CPU,
                        "context parallel, pairwise: each rank's block sent straight to every other rank")
