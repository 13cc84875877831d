// The rendezvous store: a small key-value server the coordinator runs (the job's first
// node, or localhost standalone) so agents and workers can find each other and exchange
// what Gloo and NCCL need (addresses, NCCL unique ids), and meet at barriers.
//
// One thread serves every connection: an epoll loop with non-blocking sockets, a timer heap
// for deadlines, and the data in kv_store.h. No thread per connection, so 16k ranks (or a
// flood of sockets that never speak) cost file descriptors and a few hundred bytes each,
// never threads.
//
// Every connection must pass the challenge-response of auth.h before it may send a request.
// A wrong secret is refused; a client that connects and says nothing is dropped after
// handshake_timeout; when connections run out (max_connections, or max_handshakes of them
// waiting to authenticate) the oldest one still in its handshake makes room, so silent
// sockets never crowd out the job's real clients, which authenticate within a round trip. A request's bytes are buffered only as they arrive (a frame header that
// announces 16 MiB costs nothing until the body comes), all connections together buffer at
// most max_buffered_bytes, and the store holds at most max_store_bytes. A malformed frame
// drops only its own connection. Refusals are logged with the peer's address, at most
// kLogBurst lines per log_window; the rest are counted in one summary line per window.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace partrain::comm {

struct RendezvousServerOptions {
  // Address to listen on. Default: "0.0.0.0" (all interfaces; nodes of the job connect).
  std::string host = "0.0.0.0";
  // TCP port. Default: 0, an ephemeral port the kernel picks (read it back with port()).
  int port = 0;
  // Time a new connection has to complete the handshake. Long enough for a burst of 16k
  // ranks on a busy node: a silent connection costs a descriptor and a few hundred bytes,
  // and when descriptors run out the oldest one waiting makes room anyway. Default: 30 s.
  std::chrono::milliseconds handshake_timeout{30000};
  // Time a request may take to arrive once its first byte has. Default: 30 s.
  std::chrono::milliseconds frame_timeout{30000};
  // Connections served at once; 0 = as many as the process may open (RLIMIT_NOFILE, whose
  // soft limit start() raises to the hard one) less 64. Past it a new connection takes the
  // place of the oldest one still in its handshake, or is closed. Default: 0.
  size_t max_connections = 0;
  // Connections waiting to authenticate; past it the oldest of them is dropped. 0 = no
  // limit but max_connections (then the oldest waiting one makes room). Default: 0.
  size_t max_handshakes = 0;
  // Bytes of keys and values the store holds; a SET past it is refused. Default: 1 GiB.
  size_t max_store_bytes = size_t{1} << 30;
  // Bytes of requests and replies buffered over all connections; the connection whose
  // bytes pass it is dropped. Default: 256 MiB.
  size_t max_buffered_bytes = size_t{256} << 20;
  // Refusal lines: at most kLogBurst in this long, then one summary line. Default: 10 s.
  std::chrono::milliseconds log_window{10000};
};

// Counters for tests and metrics; all but open_connections and buffered_bytes only grow.
struct RendezvousServerStats {
  uint64_t open_connections = 0;  // being served now
  uint64_t accepted = 0;
  uint64_t authenticated = 0;
  uint64_t refused_wrong_secret = 0;
  uint64_t dropped_handshake_timeout = 0;
  uint64_t dropped_malformed = 0;
  uint64_t dropped_over_capacity = 0;  // waiting handshakes or connections past their limit
  uint64_t refused_quota = 0;          // requests refused by max_store_bytes or max_buffered_bytes
  uint64_t buffered_bytes = 0;         // requests and replies buffered now
  uint64_t log_lines_suppressed = 0;   // refusals counted instead of logged one by one
};

// Refusal lines logged one by one per log_window; the rest are counted in a summary.
inline constexpr int kLogBurst = 5;

class RendezvousServer {
 public:
  // Listens and starts serving. invalid for a bad secret or host, unavailable when the
  // port cannot be bound (the message names it and says to choose another or port 0).
  static Result<std::unique_ptr<RendezvousServer>> start(std::string secret, RendezvousServerOptions options = {});
  ~RendezvousServer();  // stop()s
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  // The bound port (the real one when options.port was 0).
  int port() const;
  RendezvousServerStats stats() const;
  // Closes every connection and joins the serving thread. Idempotent.
  void stop();

  struct Impl;

 private:
  explicit RendezvousServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace partrain::comm
