// The rendezvous store's data and its blocked requests, without sockets: the event loop of
// server.cc hands it each request of an authenticated connection and sends the replies it
// gives back. A request that must wait (GET of a missing key, WAIT, BARRIER) is parked
// under its connection's id and answered by a later SET or ADD (take_ready), or forgotten
// when the connection goes or its deadline passes (cancel).
//
// Cost at scale: a parked WAIT watches one missing key at a time (the next one when it
// arrives), so a WAIT over N keys costs O(N) in all, and a BARRIER of N participants is a
// count and a bit per rank, never N keys: N ranks meeting cost O(N), not O(N^2).
//
// Quota: keys and values together may hold at most max_bytes; a SET or ADD past it is
// refused (Reply::kRefused, naming the quota), and the store is unchanged.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "comm/rendezvous/wire.h"

namespace partrain::comm {

class KvStore {
 public:
  using Waiter = uint64_t;  // the caller's id of a connection; one parked request each
  explicit KvStore(size_t max_bytes) : max_bytes_(max_bytes) {}

  // One request; the reply, or nullopt when it was parked under `w`. A malformed request
  // is answered with Reply::kBadRequest and a reason.
  std::optional<wire::Frame> handle(Waiter w, const wire::Frame& request);
  // The parked requests a SET or ADD completed since the last call, with their replies.
  std::vector<std::pair<Waiter, wire::Frame>> take_ready();
  // Forgets w's parked request (its connection closed, or its deadline passed).
  void cancel(Waiter w);
  // How long a request that handle() accepted may stay parked (GET, WAIT, BARRIER).
  static Result<std::chrono::milliseconds> timeout_of(const wire::Frame& request);

  size_t bytes() const { return bytes_; }
  size_t parked() const { return pending_.size(); }

 private:
  struct Pending {
    uint64_t seq = 0;
    wire::Op op = wire::Op::kGet;
    std::vector<std::string> keys;  // GET: the key; WAIT: every key
    size_t next = 0;                // WAIT: the first key not known to be there
  };
  struct Barrier {
    int64_t world = 0;
    int64_t arrived = 0;
    std::vector<bool> in;                               // by rank
    std::vector<std::pair<Waiter, uint64_t>> waiters;   // (waiter, seq)
  };

  wire::Frame set(const std::string& key, std::string value);
  wire::Frame add(const std::string& key, int64_t delta);
  std::optional<wire::Frame> get(Waiter w, const std::string& key);
  std::optional<wire::Frame> wait(Waiter w, std::vector<std::string> keys);
  std::optional<wire::Frame> barrier(Waiter w, const std::string& name, int64_t rank, int64_t world);
  // Parks w on its WAIT's next missing key, or makes it ready when none is missing.
  void advance_wait(Waiter w, Pending& p);
  // A key came into being: the parked requests watching it move on.
  void arrived(const std::string& key);
  Pending& park(Waiter w, wire::Op op, std::vector<std::string> keys);

  size_t max_bytes_;
  size_t bytes_ = 0;
  uint64_t seq_ = 0;
  std::unordered_map<std::string, std::string> data_;
  std::unordered_map<Waiter, Pending> pending_;
  std::unordered_map<std::string, std::vector<std::pair<Waiter, uint64_t>>> watchers_;  // key -> (waiter, seq)
  std::unordered_map<std::string, Barrier> barriers_;
  std::vector<std::pair<Waiter, wire::Frame>> ready_;
};

}  // namespace partrain::comm
