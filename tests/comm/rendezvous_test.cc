// The rendezvous store over real sockets on localhost: its operations, and that a wrong
// secret, a silent client or a malformed frame is refused, logged and dropped without
// slowing the job's real clients.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "rendezvous_helpers.h"

namespace partrain::comm {
namespace {

TEST(Rendezvous, StoreOperations) {
  auto server = start_server();
  ASSERT_TRUE(server);
  auto a = connect_client(server->port());
  auto b = connect_client(server->port());
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->set("k", std::string("v\0w", 3)).is_ok());
  auto v = b->get("k", milliseconds(100));
  ASSERT_TRUE(v.is_ok()) << v.status().message();
  EXPECT_EQ(*v, std::string("v\0w", 3));
  EXPECT_EQ(*a->add("counter", 5), 5);
  EXPECT_EQ(*b->add("counter", -2), 3);
  EXPECT_TRUE(*a->check({"k", "counter"}));
  EXPECT_FALSE(*a->check({"k", "absent"}));
  EXPECT_TRUE(*a->remove("k"));
  EXPECT_FALSE(*a->remove("k"));

  // A get blocks until another client sets the key.
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(100));
    EXPECT_TRUE(b->set("late", "here").is_ok());
  });
  auto late = a->get("late", milliseconds(3000));
  setter.join();
  ASSERT_TRUE(late.is_ok()) << late.status().message();
  EXPECT_EQ(*late, "here");

  // A missing key times out as unavailable, naming the key, after about the timeout.
  auto start = Clock::now();
  auto missing = a->get("never", milliseconds(200));
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(missing.status().message().find("never"), std::string::npos);
  EXPECT_GE(seconds_since(start), 0.19);
  EXPECT_LT(seconds_since(start), 2.0);
  auto waited = a->wait({"counter", "nope"}, milliseconds(100));
  EXPECT_EQ(waited.code(), StatusCode::kUnavailable);
  EXPECT_NE(waited.message().find("nope"), std::string::npos) << waited.message();

  // The NCCL-id style exchange: the root publishes, the others read the same bytes.
  std::string id(128, '\0');
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>(i * 7);
  std::thread reader([&] {
    auto got = b->share("nccl/tp0", false, "", milliseconds(3000));
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    EXPECT_EQ(*got, id);
  });
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(*a->share("nccl/tp0", true, id, milliseconds(3000)), id);
  reader.join();

  // A barrier of four threads, each on its own connection.
  std::vector<std::thread> ranks;
  std::atomic<int> passed{0};
  for (int r = 0; r < 4; ++r) {
    ranks.emplace_back([&, r] {
      auto c = connect_client(server->port());
      ASSERT_TRUE(c);
      if (r == 3) std::this_thread::sleep_for(milliseconds(100));
      ASSERT_TRUE(c->barrier("b0", r, 4, milliseconds(3000)).is_ok());
      ++passed;
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(passed.load(), 4);
  EXPECT_EQ(server->stats().refused_wrong_secret, 0u);
}

TEST(Rendezvous, WrongSecretAndSilentClientAreRefusedLoggedAndDoNotStallTheJob) {
  StderrCapture log;
  auto server = start_server(milliseconds(2000));
  ASSERT_TRUE(server);
  const int port = server->port();

  // A silent client: connects and never says anything.
  int silent = raw_connect(port);
  // A client with the wrong secret.
  RendezvousClientOptions o;
  o.connect_timeout = milliseconds(3000);
  auto start_wrong = Clock::now();
  auto wrong = RendezvousClient::connect("127.0.0.1", port, "not-the-job-secret-0123456789", o);
  double wrong_secs = seconds_since(start_wrong);
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("refused this process's job secret"), std::string::npos)
      << wrong.status().message();
  EXPECT_LT(wrong_secs, 1.5);

  // Meanwhile the job's real clients rendezvous as if nothing happened.
  auto job_start = Clock::now();
  std::vector<std::thread> ranks;
  std::atomic<int> ok{0};
  for (int r = 0; r < 4; ++r) {
    ranks.emplace_back([&, r] {
      auto c = connect_client(port);
      ASSERT_TRUE(c);
      ASSERT_TRUE(c->set("addr/" + std::to_string(r), "host" + std::to_string(r)).is_ok());
      ASSERT_TRUE(c->barrier("start", r, 4, milliseconds(3000)).is_ok());
      auto peer = c->get("addr/" + std::to_string((r + 1) % 4), milliseconds(3000));
      ASSERT_TRUE(peer.is_ok());
      EXPECT_EQ(*peer, "host" + std::to_string((r + 1) % 4));
      ++ok;
    });
  }
  for (auto& t : ranks) t.join();
  double job_secs = seconds_since(job_start);
  EXPECT_EQ(ok.load(), 4);
  EXPECT_LT(job_secs, 1.5) << "the real clients were slowed down by the bad ones";

  // The silent client is dropped after the handshake timeout (2 s), not never.
  double dropped_after = seconds_until_closed(silent, 6.0);
  ::close(silent);
  EXPECT_GT(dropped_after, 0.0) << "silent client was never dropped";
  EXPECT_LT(dropped_after, 5.0);

  auto stats = server->stats();
  EXPECT_EQ(stats.refused_wrong_secret, 1u);
  EXPECT_EQ(stats.dropped_handshake_timeout, 1u);
  EXPECT_EQ(stats.authenticated, 4u);
  std::string text = log.text();
  log.restore();
  EXPECT_NE(text.find("refused connection from 127.0.0.1:"), std::string::npos) << text;
  EXPECT_NE(text.find("wrong job secret"), std::string::npos) << text;
  EXPECT_NE(text.find("no handshake within 2000 ms"), std::string::npos) << text;
}

TEST(Rendezvous, ManySilentClientsDoNotStallTheServer) {
  auto server = start_server(milliseconds(2000));
  ASSERT_TRUE(server);
  std::vector<int> silent;
  for (int i = 0; i < 32; ++i) silent.push_back(raw_connect(server->port()));
  auto start = Clock::now();
  auto c = connect_client(server->port());
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->set("x", "1").is_ok());
  EXPECT_EQ(*c->get("x", milliseconds(100)), "1");
  EXPECT_LT(seconds_since(start), 0.5);
  for (int fd : silent) ::close(fd);
}

TEST(Rendezvous, MalformedFramesAreLoggedAndDropOnlyTheirConnection) {
  StderrCapture log;
  auto server = start_server();
  ASSERT_TRUE(server);
  auto good = connect_client(server->port());
  ASSERT_TRUE(good);

  // 1) A length prefix far over the limit.
  int a = raw_authenticated(server->port());
  const uint8_t too_long[4] = {0xff, 0xff, 0xff, 0x7f};
  ASSERT_EQ(::send(a, too_long, 4, MSG_NOSIGNAL), 4);
  EXPECT_GE(seconds_until_closed(a, 3.0), 0.0);
  ::close(a);
  // 2) A well-sized frame whose fields overrun it.
  int b = raw_authenticated(server->port());
  std::string body = wire::encode(wire::Frame{1, {"key", "value"}});
  body[9] = '\x7f';  // first field's length byte 0 -> huge
  ASSERT_EQ(::send(b, body.data(), body.size(), MSG_NOSIGNAL), static_cast<ssize_t>(body.size()));
  EXPECT_GE(seconds_until_closed(b, 3.0), 0.0);
  ::close(b);
  // 3) An unknown request code.
  int c = raw_authenticated(server->port());
  std::string unknown = wire::encode(wire::Frame{77, {}});
  ASSERT_EQ(::send(c, unknown.data(), unknown.size(), MSG_NOSIGNAL), static_cast<ssize_t>(unknown.size()));
  EXPECT_GE(seconds_until_closed(c, 3.0), 0.0);
  ::close(c);
  // 4) Garbage instead of a handshake.
  int d = raw_connect(server->port());
  std::string junk(auth::kProofBytes, 'G');
  ASSERT_EQ(::send(d, junk.data(), junk.size(), MSG_NOSIGNAL), static_cast<ssize_t>(junk.size()));
  EXPECT_GE(seconds_until_closed(d, 3.0), 0.0);
  ::close(d);

  // The server and its real client carry on.
  ASSERT_TRUE(good->set("still", "alive").is_ok());
  EXPECT_EQ(*good->get("still", milliseconds(100)), "alive");
  EXPECT_EQ(server->stats().dropped_malformed, 4u);
  std::string text = log.text();
  log.restore();
  EXPECT_NE(text.find("malformed frame"), std::string::npos) << text;
  EXPECT_NE(text.find("malformed request"), std::string::npos) << text;
  EXPECT_NE(text.find("malformed handshake"), std::string::npos) << text;
}

// A client that dies in the middle of a long GET frees its server thread at once, not when
// the GET would have timed out.
TEST(Rendezvous, HangUpDuringALongWaitEndsItsConnection) {
  auto server = start_server();
  ASSERT_TRUE(server);
  int fd = raw_authenticated(server->port());
  std::string get = wire::encode(wire::Frame{static_cast<uint8_t>(wire::Op::kGet), {"never", wire::encode_i64(60000)}});
  ASSERT_EQ(::send(fd, get.data(), get.size(), MSG_NOSIGNAL), static_cast<ssize_t>(get.size()));
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(server->stats().open_connections, 1u);
  ::close(fd);
  auto start = Clock::now();
  while (server->stats().open_connections != 0 && seconds_since(start) < 5.0) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(server->stats().open_connections, 0u);
  EXPECT_LT(seconds_since(start), 2.0);
}

// The client checks the server too: a listener that does not know the secret (here one that
// accepts any proof) is refused.
TEST(Rendezvous, ClientRefusesAServerThatCannotProveTheSecret) {
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<struct sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  socklen_t len = sizeof(a);
  ::getsockname(listener, reinterpret_cast<struct sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  std::thread impostor([&] {
    int fd = ::accept(listener, nullptr, nullptr);
    auto deadline = Clock::now() + milliseconds(2000);
    auto hello = auth::encode_hello(*auth::random_nonce());
    (void)wire::write_all(fd, hello.data(), hello.size(), deadline);
    uint8_t proof[auth::kProofBytes];
    (void)wire::read_exact(fd, proof, sizeof(proof), deadline);
    uint8_t verdict[auth::kVerdictBytes] = {1};  // "accepted", with a MAC of zeros
    (void)wire::write_all(fd, verdict, sizeof(verdict), deadline);
    std::this_thread::sleep_for(milliseconds(200));
    ::close(fd);
  });
  RendezvousClientOptions o;
  o.connect_timeout = milliseconds(2000);
  auto c = RendezvousClient::connect("127.0.0.1", port, kSecret, o);
  impostor.join();
  ::close(listener);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("could not prove"), std::string::npos) << c.status().message();
}

TEST(Rendezvous, ClientGivesUpWhenNoServerListens) {
  // Bind then close to get a port nobody listens on.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<struct sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<struct sockaddr*>(&a), &len);
  ::close(fd);
  RendezvousClientOptions o;
  o.connect_timeout = milliseconds(300);
  auto start = Clock::now();
  auto c = RendezvousClient::connect("127.0.0.1", ntohs(a.sin_port), kSecret, o);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
  EXPECT_LT(seconds_since(start), 2.0);
}

}  // namespace
}  // namespace partrain::comm
