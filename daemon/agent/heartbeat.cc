// See heartbeat.h.
#include "agent/heartbeat.h"

#include <utility>
#include <vector>

#include <fmt/format.h>

#include "comm/rendezvous/keys.h"

namespace partrain::agent {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

Heartbeat::Heartbeat(std::unique_ptr<comm::RendezvousClient> store, int node, int num_nodes, milliseconds interval,
                     milliseconds timeout)
    : store_(std::move(store)), node_(node), num_nodes_(num_nodes), interval_(interval), timeout_(timeout),
      thread_([this] { loop(); }) {}

Heartbeat::~Heartbeat() {
  stop_.store(true);
  thread_.join();
}

std::optional<HeartbeatFailure> Heartbeat::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void Heartbeat::fail(std::string why, bool store_lost) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!failure_) failure_ = HeartbeatFailure{std::move(why), store_lost};
}

bool Heartbeat::round(std::vector<int64_t>* seen, std::vector<Clock::time_point>* changed) {
  const auto timeout_s = std::chrono::duration_cast<std::chrono::seconds>(timeout_).count();
  if (!store_->add(rdzv_keys::heartbeat(node_), 1).is_ok()) return false;
  for (int n = 0; n < num_nodes_; ++n) {
    if (n == node_) continue;
    Result<int64_t> v = store_->add(rdzv_keys::heartbeat(n), 0);
    if (!v) return false;
    const auto i = static_cast<size_t>(n);
    if (*v != (*seen)[i]) {
      (*seen)[i] = *v;
      (*changed)[i] = Clock::now();
    } else if (Clock::now() - (*changed)[i] > timeout_) {
      // A node that finished its ranks stops heartbeating; that is no loss.
      Result<bool> done = store_->check({rdzv_keys::done(n)});
      if (done && *done) continue;
      fail(fmt::format("peer node {} lost: no heartbeat for {} s", n, timeout_s), false);
    }
  }
  if (Result<bool> aborted = store_->check({rdzv_keys::job_abort()}); aborted && *aborted) {
    Result<std::string> why = store_->get(rdzv_keys::job_abort(), milliseconds(1000));
    fail("another node aborted the job: " + (why ? *why : std::string("?")), false);
  }
  return true;
}

void Heartbeat::loop() {
  std::vector<int64_t> seen(static_cast<size_t>(num_nodes_), -1);
  std::vector<Clock::time_point> changed(static_cast<size_t>(num_nodes_), Clock::now());
  Clock::time_point last_ok = Clock::now();
  while (!stop_.load()) {
    if (round(&seen, &changed)) {
      last_ok = Clock::now();
    } else if (Clock::now() - last_ok > timeout_) {
      fail(fmt::format("the coordinator's store stopped answering for {} s",
                       std::chrono::duration_cast<std::chrono::seconds>(timeout_).count()),
           true);
    }
    for (auto t = Clock::now(); !stop_.load() && Clock::now() - t < interval_;) {
      std::this_thread::sleep_for(milliseconds(20));
    }
  }
}

}  // namespace partrain::agent
