// The rendezvous store: a small key-value server the coordinator runs (the job's first
// node, or localhost standalone) so agents and workers can find each other and exchange
// what Gloo and NCCL need (addresses, NCCL unique ids).
//
// Every connection must pass the challenge-response of auth.h before it may send a request.
// A wrong secret is refused and logged with the peer address; a client that connects and
// says nothing is dropped after handshake_timeout; a malformed frame is logged and its
// connection dropped. Each connection has its own thread and every read has a deadline, so
// none of these can stall the server or the job's real clients.
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
  // Time a new connection has to complete the handshake. Default: 5 s.
  std::chrono::milliseconds handshake_timeout{5000};
  // Time a request may take to arrive once its first byte has. Default: 30 s.
  std::chrono::milliseconds frame_timeout{30000};
  // Connections served at once; more are closed with a log line. Default: 4096.
  size_t max_connections = 4096;
};

// Counters for tests and metrics; all but open_connections only ever grow.
struct RendezvousServerStats {
  uint64_t open_connections = 0;  // being served now
  uint64_t accepted = 0;
  uint64_t authenticated = 0;
  uint64_t refused_wrong_secret = 0;
  uint64_t dropped_handshake_timeout = 0;
  uint64_t dropped_malformed = 0;
};

class RendezvousServer {
 public:
  // Listens and starts serving. invalid for a bad secret or host, unavailable when the
  // port cannot be bound.
  static Result<std::unique_ptr<RendezvousServer>> start(std::string secret, RendezvousServerOptions options = {});
  ~RendezvousServer();  // stop()s
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  // The bound port (the real one when options.port was 0).
  int port() const;
  RendezvousServerStats stats() const;
  // Closes every connection, wakes blocked waits, joins all threads. Idempotent.
  void stop();

  struct Impl;

 private:
  explicit RendezvousServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace partrain::comm
