// Helpers of the rendezvous tests: a server on loopback, real and raw clients (a raw one
// can then send what no real client would), the time until the server closes a socket,
// and a capture of the log (stderr).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "comm/rendezvous/auth.h"
#include "comm/rendezvous/client.h"
#include "comm/rendezvous/server.h"
#include "comm/rendezvous/wire.h"

namespace partrain::comm {


using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
inline constexpr const char* kSecret = "the-real-job-secret-0123456789";

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

inline std::unique_ptr<RendezvousServer> start_server(milliseconds handshake_timeout = milliseconds(5000)) {
  RendezvousServerOptions o;
  o.host = "127.0.0.1";
  o.handshake_timeout = handshake_timeout;
  auto s = RendezvousServer::start(kSecret, o);
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return s ? std::move(s).value() : nullptr;
}

inline std::unique_ptr<RendezvousClient> connect_client(int port, const std::string& secret = kSecret) {
  RendezvousClientOptions o;
  o.connect_timeout = milliseconds(3000);
  auto c = RendezvousClient::connect("127.0.0.1", port, secret, o);
  EXPECT_TRUE(c.is_ok()) << c.status().message();
  return c ? std::move(c).value() : nullptr;
}

inline int raw_connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a {};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<struct sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// Seconds until the server closes `fd` (EOF), or -1 after `limit`.
inline double seconds_until_closed(int fd, double limit) {
  auto start = Clock::now();
  char buf[256];
  while (seconds_since(start) < limit) {
    struct pollfd p {fd, POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) {
      ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) return seconds_since(start);
    }
  }
  return -1;
}

// Captures what the process writes to stderr (the log) while alive.
class StderrCapture {
 public:
  StderrCapture() {
    std::fflush(stderr);
    saved_ = ::dup(2);
    char tmpl[] = "/tmp/partrain-rdzv-log-XXXXXX";
    int fd = ::mkstemp(tmpl);
    path_ = tmpl;
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~StderrCapture() {
    restore();
    std::remove(path_.c_str());
  }
  std::string text() {
    std::fflush(stderr);
    std::ifstream in(path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }

 private:
  int saved_ = -1;
  std::string path_;
};


// Authenticates over a raw socket, so the test can then send what no real client would.
inline int raw_authenticated(int port) {
  int fd = raw_connect(port);
  auto deadline = Clock::now() + milliseconds(2000);
  const auto greeting = auth::encode_greeting();
  EXPECT_TRUE(wire::write_all(fd, greeting.data(), greeting.size(), deadline).is_ok());
  uint8_t hello[auth::kHelloBytes];
  EXPECT_TRUE(wire::read_exact(fd, hello, sizeof(hello), deadline).is_ok());
  auto ns = auth::decode_hello(hello);
  auto nc = *auth::random_nonce();
  auto proof = auth::encode_proof(nc, auth::client_proof(kSecret, *ns, nc));
  EXPECT_TRUE(wire::write_all(fd, proof.data(), proof.size(), deadline).is_ok());
  uint8_t verdict[auth::kVerdictBytes];
  EXPECT_TRUE(wire::read_exact(fd, verdict, sizeof(verdict), deadline).is_ok());
  EXPECT_EQ(verdict[0], 1);
  return fd;
}


}  // namespace partrain::comm
