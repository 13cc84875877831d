// Heartbeats: how an agent learns that another node of its job is gone.
//
// A thread bumps this node's counter hb/<node> in the coordinator's rendezvous store every
// `interval` and reads every other node's. It watches three things:
//   - a peer whose counter has not moved for `timeout` (its agent hangs, its node froze or
//     lost the network), unless that peer said done/<peer> (it finished its ranks);
//   - the store itself: no request answered for `timeout` (the coordinator node is gone);
//   - job/abort, the key an agent sets when it tears its own workers down for good.
// The first of these is kept; `failure()` reports it from then on, to the supervise loop
// (supervise.h), which kills this node's workers and ends the job with exit 75.
//
// Timing: a peer's bump is seen within one interval, so a peer is declared lost between
// `timeout` and `timeout + 2 * interval` after its last bump reached the store. Every agent
// decides on its own, from its own reads, so on a real loss they all report it within
// about one interval of each other. A store request waits at most `interval` (the client's
// I/O budget), so a hung store is noticed within `timeout + 2 * interval` as well.
//
// At scale: with N nodes each agent makes N + 1 requests per interval (its bump, N - 1
// reads, the abort check), one at a time on its own connection, so the one store serves
// about N^2 / interval requests: 64 nodes at the default 2 s is ~2,100 per second, 512
// nodes ~131,000. Past a few hundred nodes raise --heartbeat-interval (and the timeout
// with it, at least twice the interval) so the store keeps up; a round of N - 1 reads must
// also fit in one interval (N times the round-trip time to the coordinator).
//
// Example: interval 2 s, timeout 30 s, node 3 of 4 freezes at t = 100 s right after a
// bump. Nodes 0-2 keep bumping; each sees hb/3 stay put and, at some t between 130 s and
// 134 s, reports "peer node 3 lost: no heartbeat for 30 s".
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "comm/rendezvous/client.h"

namespace partrain::agent {

// Why the job must end, as a heartbeat saw it.
struct HeartbeatFailure {
  // One line for the log: "peer node 1 lost: no heartbeat for 30 s",
  // "the coordinator's store stopped answering for 30 s",
  // "another node aborted the job: node 1: <its reason>".
  std::string why;
  // The store itself stopped answering: no other agent can be told through it.
  bool store_lost = false;
};

class Heartbeat {
 public:
  // Starts the thread on `store`, a connection of its own whose I/O budget is `interval`.
  Heartbeat(std::unique_ptr<comm::RendezvousClient> store, int node, int num_nodes,
            std::chrono::milliseconds interval, std::chrono::milliseconds timeout);
  ~Heartbeat();  // stops and joins the thread (within about 20 ms plus one store request)
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // The first failure seen, or nullopt while every peer and the store are alive.
  std::optional<HeartbeatFailure> failure() const;

 private:
  void loop();
  // One round: bump, read the peers, check job/abort. False when the store did not answer.
  bool round(std::vector<int64_t>* seen, std::vector<std::chrono::steady_clock::time_point>* changed);
  void fail(std::string why, bool store_lost);

  std::unique_ptr<comm::RendezvousClient> store_;
  int node_, num_nodes_;
  std::chrono::milliseconds interval_, timeout_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::optional<HeartbeatFailure> failure_;
  std::thread thread_;  // last: started once every member above is ready
};

}  // namespace partrain::agent
