// A client of the rendezvous store (server.h). It authenticates with the job secret
// (and checks that the server knows it too), then runs one request at a time.
//
// Thread safety: calls are serialised by a mutex, so a blocking get() or wait() holds the
// connection until it returns. A thread that must block while another one publishes keys
// takes its own connection: clone().
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace partrain::comm {

struct RendezvousClientOptions {
  // How long to keep retrying while the coordinator's server is not up yet. Default: 60 s.
  std::chrono::milliseconds connect_timeout{60000};
  // Budget for one request beyond the wait it asks for. Default: 30 s.
  std::chrono::milliseconds io_timeout{30000};
};

class RendezvousClient {
 public:
  // Connects and authenticates. invalid when the server refuses our secret or cannot prove
  // its own (both are configuration errors: the secrets differ); unavailable when no server
  // answered within connect_timeout.
  static Result<std::unique_ptr<RendezvousClient>> connect(std::string host, int port, std::string secret,
                                                      RendezvousClientOptions options = {});
  ~RendezvousClient();
  RendezvousClient(const RendezvousClient&) = delete;
  RendezvousClient& operator=(const RendezvousClient&) = delete;

  // A second, independent connection to the same server with the same secret.
  Result<std::unique_ptr<RendezvousClient>> clone() const;

  Status set(std::string_view key, std::string_view value);
  // Waits up to `timeout` for the key; unavailable naming the key when it never appears.
  Result<std::string> get(std::string_view key, std::chrono::milliseconds timeout);
  // Adds `delta` to the counter at `key` (absent counts as 0) and returns the new value.
  Result<int64_t> add(std::string_view key, int64_t delta);
  // True when the key existed.
  Result<bool> remove(std::string_view key);
  // Waits until every key exists; unavailable naming the missing keys on timeout.
  Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // True when every key exists now; never blocks.
  Result<bool> check(const std::vector<std::string>& keys);
  // Barrier over `world` participants: publishes `name`/rank, then waits for all `world`
  // keys. Each barrier needs a fresh name (e.g. with a generation counter).
  Status barrier(std::string_view name, int rank, int world, std::chrono::milliseconds timeout);

  // One process publishes a value that every other one reads: the root sets `key` to
  // `root_value` and returns it; the others wait up to `timeout` for it. Used for NCCL
  // unique ids, which rank 0 of a group creates.
  Result<std::string> share(std::string_view key, bool is_root, std::string_view root_value,
                            std::chrono::milliseconds timeout);

  // "host:port" of the server, for messages.
  const std::string& address() const { return address_; }

 private:
  RendezvousClient(int fd, std::string host, int port, std::string secret, RendezvousClientOptions options);
  struct Reply;
  Result<Reply> call(uint8_t op, std::vector<std::string> fields, std::chrono::milliseconds wait);

  std::mutex mu_;
  int fd_ = -1;
  std::string host_;
  int port_ = 0;
  std::string secret_;
  RendezvousClientOptions options_;
  std::string address_;
};

}  // namespace partrain::comm
