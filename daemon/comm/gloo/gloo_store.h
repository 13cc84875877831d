// Gloo's rendezvous::Store over our authenticated store client, so Gloo's TCP transport
// can publish its addresses and build its full mesh through the coordinator. Keys are put
// under `prefix` so each group (and each of its contexts) has its own namespace.
//
// Gloo expects stores to throw: failures become gloo::IoException carrying our message.
// Only call into Gloo inside the try blocks of gloo_communicator.cc.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "comm/rendezvous/client.h"

namespace partrain::comm {

class GlooStore final : public ::gloo::rendezvous::Store {
 public:
  GlooStore(RendezvousClient& client, std::string prefix, std::chrono::milliseconds timeout)
      : client_(client), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  RendezvousClient& client_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

}  // namespace partrain::comm
