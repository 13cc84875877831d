// The ring context-parallel strategy ("ring", family context; Megatron-core's default, as
// in Ring Attention): the K/V blocks travel around the cp ring, each rank passing the block
// it holds to the next rank while the host attends to it, so after cp - 1 hops every rank
// has seen every block and only the first hop's latency is exposed.
//
// Forward, rank r of P: step i attends to the block of rank (r - i) mod P; during step i
// the block moves on to r + 1 and the next one arrives from r - 1 (two scratch blocks in
// turn). Backward: the blocks travel again; each rank also holds, at step i, the running
// gradient of block (r - i): it computes its own part of it into a fresh block while the
// previous step's running gradient goes to r + 1 and this step's arrives from r - 1, then
// adds the two (the host's add). After P steps each running gradient has visited every
// rank; one last hop brings it home (r + 1 holds, at the end, the block of r + 1: it is
// sent there). Scratch: two K/V blocks, two gradient blocks, one arriving gradient.
//
// Worked example, P = 4, rank 1, forward: attends to blocks 1 (its own), 0, 3, 2, in that
// order, sending 1, 0, 3 on to rank 2 and receiving 0, 3, 2 from rank 0.
//
// [plugins.ring] in the job file: no keys yet; any key is refused.
//
// Sees only the SDK headers: builds in tree exactly as out of tree.
#include <chrono>
#include <utility>
#include <vector>

#include "partrain/context_sdk.h"

namespace {

using Clock = std::chrono::steady_clock;
double ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

class Ring : public partrain::sdk::ContextStrategy {
 public:
  explicit Ring(const partrain_context_init_args_v1_t& args) : comm_(*args.cp), p2p_(*args.cp_p2p) {
    partrain::sdk::config_numbers(args.config_toml, "ring", {});  // refuses every key
    P_ = p2p_.size;
    r_ = p2p_.rank;
    next_ = (r_ + 1) % P_;
    prev_ = (r_ - 1 + P_) % P_;
  }

  size_t scratch_blocks() override { return 5; }

  void forward(const partrain::sdk::Blocks& b) override {
    const float* cur = b.kv();
    for (int i = 0; i < P_; ++i) {
      float* arriving = b.scratch(static_cast<size_t>(i % 2));
      Transfer t;
      if (i + 1 < P_) t = start(cur, b.count(), arriving, b.count());
      b.attend((r_ - i + P_) % P_, cur);
      finish(t);
      cur = arriving;
    }
  }

  void backward(const partrain::sdk::Blocks& b) override {
    const size_t n = b.count();
    float* arriving_grad = b.scratch(4);
    const float* cur = b.kv();
    float* running = nullptr;  // the previous step's running gradient, travelling on
    for (int i = 0; i < P_; ++i) {
      float* arriving = b.scratch(static_cast<size_t>(i % 2));
      float* mine = b.scratch(2 + static_cast<size_t>(i % 2));
      // Every rank starts the K/V hop, then the gradient hop: the same order on each.
      Transfer kv, grad;
      if (i + 1 < P_) kv = start(cur, n, arriving, n);
      if (i > 0) grad = start(running, n, arriving_grad, n);
      b.zero(mine);
      b.attend_backward((r_ - i + P_) % P_, cur, mine);
      finish(kv);
      finish(grad);
      if (i > 0) b.add(mine, arriving_grad);  // + what the ranks before added to this block
      running = mine;
      cur = arriving;
    }
    // The running gradient of block r + 1 is complete: home it goes; this rank's arrives.
    if (P_ == 1) {
      b.add(b.dkv(), running);
      return;
    }
    finish(start(running, n, b.dkv(), n));
  }

  void gather(const float* part, float* full, size_t count) override {
    std::vector<size_t> counts(static_cast<size_t>(P_), count);
    const Clock::time_point t0 = Clock::now();
    partrain::sdk::wait(comm_, partrain::sdk::start_all_gather(comm_, part, full, counts));
    const double took = ms(t0, Clock::now());
    stats_.comm_ms += took;
    stats_.exposed_ms += took;
    stats_.bytes += count * sizeof(float);
    stats_.collectives += 1;
  }

  void step_end(partrain_context_stats_v1_t* stats) override {
    if (stats != nullptr) *stats = stats_;
    stats_ = {};
  }

 private:
  struct Transfer {
    void* work = nullptr;
    Clock::time_point started;
  };
  // Sends to the next rank and receives from the previous one, together.
  Transfer start(const float* send, size_t send_count, float* recv, size_t recv_count) {
    Transfer t;
    t.started = Clock::now();
    t.work = partrain::sdk::start_exchange(p2p_, send, send_count, next_, recv, recv_count, prev_);
    stats_.bytes += send_count * sizeof(float);
    stats_.collectives += 1;
    return t;
  }
  // Waits for a transfer: the wait is exposed; the time it was in flight (from its start,
  // or from the end of the transfer finished before it, whichever is later) is comm time,
  // so two transfers in flight together (backward's K/V and gradient) count once.
  void finish(const Transfer& t) {
    if (t.work == nullptr) return;
    const Clock::time_point w0 = Clock::now();
    partrain::sdk::wait(p2p_, t.work);
    const Clock::time_point w1 = Clock::now();
    stats_.exposed_ms += ms(w0, w1);
    stats_.comm_ms += ms(t.started > in_flight_until_ ? t.started : in_flight_until_, w1);
    in_flight_until_ = w1;
  }

  partrain_comm_v2_t comm_;
  partrain_p2p_v1_t p2p_;
  int P_ = 1, r_ = 0, next_ = 0, prev_ = 0;
  Clock::time_point in_flight_until_{};
  partrain_context_stats_v1_t stats_{};
};

}  // namespace

PARTRAIN_CONTEXT_PLUGIN(Ring, "ring", "1.0.0", PARTRAIN_CAP_CPU | PARTRAIN_CAP_OVERLAP,
                        "context parallel, ring: K/V blocks passed around the cp ring while the host "
                        "attends to the one it holds (Megatron-core)")
