// What an attack on the rendezvous port found (issue 22), each reproduced and held off:
// 4,200 unauthenticated sockets once pushed the server to thousands of threads and refused
// real joins; an authenticated client made it allocate 16 MiB per announced frame before
// any body arrived; SET had no quota; every refused connection logged a WARN line.
#include <dirent.h>
#include <sys/resource.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "rendezvous_helpers.h"

namespace partrain::comm {
namespace {

int threads_now() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/task"); d != nullptr) {
    while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

long rss_kib() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// 4,200 sockets that never speak: one server thread throughout, the oldest waiting ones
// dropped past max_handshakes (1024 here), and real clients still join at once.
TEST(RendezvousAttack, AFloodOfSilentSocketsTakesNoThreadsAndRefusesNoRealJoin) {
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_max < 9000) GTEST_SKIP() << "needs 9000 open files (RLIMIT_NOFILE hard limit " << rl.rlim_max << ")";
  StderrCapture log;
  RendezvousServerOptions o;
  o.host = "127.0.0.1";
  o.handshake_timeout = milliseconds(30000);
  o.max_handshakes = 1024;  // a site's tighter bound: the flood passes it
  auto started = RendezvousServer::start(kSecret, o);
  ASSERT_TRUE(started);
  auto& server = *started;
  const int before = threads_now();
  std::vector<int> flood;
  for (int i = 0; i < 4200; ++i) flood.push_back(raw_connect(server->port()));
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(threads_now(), before) << "the server started threads for connections";
  const auto start = Clock::now();
  std::vector<std::thread> ranks;
  std::atomic<int> ok{0};
  for (int r = 0; r < 4; ++r) {
    ranks.emplace_back([&, r] {
      auto c = connect_client(server->port());
      if (c && c->barrier("start", r, 4, milliseconds(5000)).is_ok()) ++ok;
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(ok.load(), 4) << "a real client was refused during the flood";
  EXPECT_LT(seconds_since(start), 2.0);
  const RendezvousServerStats st = server->stats();
  EXPECT_GE(st.dropped_over_capacity, 4200u - 1024u);  // past max_handshakes (1024), the oldest go
  EXPECT_LE(st.open_connections, 1024u + 4u);
  for (int fd : flood) ::close(fd);
  // The refusals: a few lines, then one summary per window, not one line each.
  const std::string text = log.text();
  log.restore();
  EXPECT_LE(count(text, "dropped connection from"), kLogBurst) << text.substr(0, 2000);
}

// A frame header announcing 16 MiB costs nothing until its body arrives: 64 such frames
// would be 1 GiB if allocated up front.
TEST(RendezvousAttack, AnAnnouncedFrameCostsNothingUntilItsBodyArrives) {
  RendezvousServerOptions o;
  o.host = "127.0.0.1";
  o.frame_timeout = milliseconds(2000);
  auto server = RendezvousServer::start(kSecret, o);
  ASSERT_TRUE(server);
  const long rss_before = rss_kib();
  std::vector<int> fds;
  for (int i = 0; i < 64; ++i) {
    const int fd = raw_authenticated((*server)->port());
    const uint32_t len = 16u << 20;
    char header[14] = {static_cast<char>(len & 0xff), static_cast<char>((len >> 8) & 0xff),
                       static_cast<char>((len >> 16) & 0xff), static_cast<char>(len >> 24), 1, 2, 0, 0, 0, 3, 0, 0, 0, 'k'};
    ASSERT_EQ(::send(fd, header, sizeof header, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof header));
    fds.push_back(fd);
  }
  std::this_thread::sleep_for(milliseconds(300));
  const RendezvousServerStats st = (*server)->stats();
  EXPECT_LE(st.buffered_bytes, 64u * 64u) << "bytes buffered for 64 cut frames";
  EXPECT_LT(rss_kib() - rss_before, 64 * 1024) << "the server grew by the announced sizes";
  // A body that never comes is a malformed frame after frame_timeout.
  for (int fd : fds) EXPECT_GE(seconds_until_closed(fd, 5.0), 0.0);
  for (int fd : fds) ::close(fd);
  EXPECT_EQ((*server)->stats().dropped_malformed, 64u);
}

// SET has a quota: past max_store_bytes it is refused with a reason, the connection and
// the store stay usable, and the other clients carry on.
TEST(RendezvousAttack, SetPastTheQuotaIsRefusedAndTheStoreStaysUsable) {
  RendezvousServerOptions o;
  o.host = "127.0.0.1";
  o.max_store_bytes = 64 << 10;
  auto server = RendezvousServer::start(kSecret, o);
  ASSERT_TRUE(server);
  auto hog = connect_client((*server)->port());
  auto good = connect_client((*server)->port());
  ASSERT_TRUE(hog && good);
  ASSERT_TRUE(good->set("addr/0", "10.0.0.1:1234").is_ok());
  Status refused;
  int stored = 0;
  for (int i = 0; i < 100 && refused.is_ok(); ++i) {
    refused = hog->set("junk/" + std::to_string(i), std::string(8 << 10, 'x'));
    if (refused.is_ok()) ++stored;
  }
  ASSERT_FALSE(refused.is_ok()) << "no quota: 800 KiB stored";
  EXPECT_EQ(stored, 7);  // 8 x (8 KiB + key) pass 64 KiB
  EXPECT_NE(refused.message().find("quota is 65536 (max_store_bytes)"), std::string::npos) << refused.message();
  EXPECT_EQ(*good->get("addr/0", milliseconds(100)), "10.0.0.1:1234");
  ASSERT_TRUE(hog->remove("junk/0"));
  EXPECT_TRUE(hog->set("small", "1").is_ok());  // the same connection goes on
  EXPECT_EQ((*server)->stats().refused_quota, 1u);
}

// Refused connections are logged at a bounded rate: kLogBurst lines, then a summary with
// the count per cause once the window is over.
TEST(RendezvousAttack, RefusalsAreLoggedAtABoundedRate) {
  StderrCapture log;
  RendezvousServerOptions o;
  o.host = "127.0.0.1";
  o.log_window = milliseconds(1000);
  auto server = RendezvousServer::start(kSecret, o);
  ASSERT_TRUE(server);
  RendezvousClientOptions co;
  co.connect_timeout = milliseconds(2000);
  for (int i = 0; i < 200; ++i) {
    ASSERT_FALSE(RendezvousClient::connect("127.0.0.1", (*server)->port(), "not-the-secret-0123456789", co));
  }
  std::this_thread::sleep_for(milliseconds(2200));
  const std::string text = log.text();
  log.restore();
  EXPECT_EQ(count(text, "refused connection from"), kLogBurst) << text;
  EXPECT_NE(text.find("195 more refused connections in the last"), std::string::npos) << text;
  EXPECT_NE(text.find("(195 wrong job secret)"), std::string::npos) << text;
  EXPECT_EQ((*server)->stats().refused_wrong_secret, 200u);
  EXPECT_EQ((*server)->stats().log_lines_suppressed, 195u);
}

// Many ranks meet at one barrier through one server thread; it costs them O(ranks).
TEST(RendezvousAttack, ABarrierOfManyRanksOnOneThread) {
  auto server = start_server();
  ASSERT_TRUE(server);
  constexpr int kRanks = 256;
  std::vector<std::thread> ranks;
  std::atomic<int> ok{0};
  const auto start = Clock::now();
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      auto c = connect_client(server->port());
      if (!c) return;
      if (!c->set("addr/" + std::to_string(r), "x").is_ok()) return;
      if (!c->barrier("all", r, kRanks, milliseconds(20000)).is_ok()) return;
      if (c->get("addr/" + std::to_string((r + 1) % kRanks), milliseconds(1000)).is_ok()) ++ok;
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(ok.load(), kRanks);
  std::printf("%d ranks: connect, SET, BARRIER, GET in %.3f s\n", kRanks, seconds_since(start));
}

}  // namespace
}  // namespace partrain::comm
