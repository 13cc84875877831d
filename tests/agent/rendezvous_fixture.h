// A rendezvous store on loopback in the test's own process, and connections to it: what
// the heartbeat and supervise tests watch and write, as the coordinator's store would be.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "comm/rendezvous/client.h"
#include "comm/rendezvous/server.h"

namespace partrain::agent {

class LoopbackStore : public ::testing::Test {
 protected:
  static constexpr const char* kSecret = "agent-test-secret-0123456789abcdef";

  void SetUp() override {
    comm::RendezvousServerOptions o;
    o.host = "127.0.0.1";
    Result<std::unique_ptr<comm::RendezvousServer>> s = comm::RendezvousServer::start(kSecret, o);
    ASSERT_TRUE(s) << s.status().message();
    server_ = std::move(s).value();
    store_ = connect(std::chrono::milliseconds(5000));
    ASSERT_NE(store_, nullptr);
  }

  // A connection whose requests wait at most `io_timeout`.
  std::unique_ptr<comm::RendezvousClient> connect(std::chrono::milliseconds io_timeout) {
    comm::RendezvousClientOptions o;
    o.connect_timeout = std::chrono::milliseconds(3000);
    o.io_timeout = io_timeout;
    Result<std::unique_ptr<comm::RendezvousClient>> c =
        comm::RendezvousClient::connect("127.0.0.1", server_->port(), kSecret, o);
    EXPECT_TRUE(c) << c.status().message();
    return c ? std::move(c).value() : nullptr;
  }

  // The key's value now, or "" when it is not set.
  std::string value(const std::string& key) {
    Result<bool> there = store_->check({key});
    if (!there || !*there) return "";
    Result<std::string> v = store_->get(key, std::chrono::milliseconds(1000));
    return v ? *v : "";
  }

  std::unique_ptr<comm::RendezvousServer> server_;
  std::unique_ptr<comm::RendezvousClient> store_;  // the test's own connection
};

}  // namespace partrain::agent
