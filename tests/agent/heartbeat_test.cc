// Heartbeats through a real rendezvous store on loopback: live peers are never lost, a
// silent one is lost after the timeout (within the bound heartbeat.h states), a peer that
// said done is not, another node's abort and a silent store are reported as such.
#include "agent/heartbeat.h"

#include <chrono>
#include <optional>
#include <thread>

#include <gtest/gtest.h>

#include "rendezvous_fixture.h"

namespace partrain::agent {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kInterval{200};
constexpr milliseconds kTimeout{1000};

class HeartbeatTest : public LoopbackStore {
 protected:
  std::unique_ptr<Heartbeat> node(int n, int num_nodes) {
    return std::make_unique<Heartbeat>(connect(kInterval), n, num_nodes, kInterval, kTimeout);
  }
};

// Waits up to `limit` for a failure; returns it with the seconds it took.
std::optional<HeartbeatFailure> wait_failure(const Heartbeat& hb, Clock::time_point t0, double* secs,
                                             milliseconds limit = milliseconds(5000)) {
  while (Clock::now() - t0 < limit) {
    if (std::optional<HeartbeatFailure> f = hb.failure()) {
      *secs = std::chrono::duration<double>(Clock::now() - t0).count();
      return f;
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  return std::nullopt;
}

TEST_F(HeartbeatTest, LivePeersAreNeverLost) {
  auto hb0 = node(0, 2);
  auto hb1 = node(1, 2);
  std::this_thread::sleep_for(2 * kTimeout);
  EXPECT_FALSE(hb0->failure().has_value()) << hb0->failure()->why;
  EXPECT_FALSE(hb1->failure().has_value()) << hb1->failure()->why;
}

TEST_F(HeartbeatTest, SilentPeerIsLostAfterTheTimeout) {
  auto hb0 = node(0, 2);
  auto hb1 = node(1, 2);
  std::this_thread::sleep_for(2 * kInterval);
  hb1.reset();  // node 1 stops bumping: its last bump came at most one interval ago
  const auto t0 = Clock::now();
  double secs = 0;
  std::optional<HeartbeatFailure> f = wait_failure(*hb0, t0, &secs);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->why, "peer node 1 lost: no heartbeat for 1 s");
  EXPECT_FALSE(f->store_lost);
  // Between timeout - interval and timeout + 2 intervals after t0, plus slack for a loaded
  // machine on the late side.
  EXPECT_GE(secs, 0.75);
  EXPECT_LE(secs, 1.4 + 1.0);
}

TEST_F(HeartbeatTest, PeerThatSaidDoneIsNotLost) {
  auto hb0 = node(0, 2);
  auto hb1 = node(1, 2);
  std::this_thread::sleep_for(2 * kInterval);
  ASSERT_TRUE(store_->set("done/1", "1"));
  hb1.reset();
  std::this_thread::sleep_for(kTimeout + 4 * kInterval);
  EXPECT_FALSE(hb0->failure().has_value()) << hb0->failure()->why;
}

TEST_F(HeartbeatTest, AnotherNodesAbortIsReported) {
  auto hb0 = node(0, 1);
  std::this_thread::sleep_for(kInterval);
  EXPECT_FALSE(hb0->failure().has_value());
  ASSERT_TRUE(store_->set("job/abort", "node 1: rank 3 (pid 77) died: exited with code 1"));
  double secs = 0;
  std::optional<HeartbeatFailure> f = wait_failure(*hb0, Clock::now(), &secs);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->why, "another node aborted the job: node 1: rank 3 (pid 77) died: exited with code 1");
  EXPECT_FALSE(f->store_lost);
  EXPECT_LE(secs, 2 * kInterval.count() / 1000.0 + 1.0);
}

TEST_F(HeartbeatTest, SilentStoreIsReportedAsTheStoreLost) {
  auto hb0 = node(0, 2);
  auto hb1 = node(1, 2);
  std::this_thread::sleep_for(2 * kInterval);
  server_->stop();  // the coordinator is gone: no request is answered any more
  const auto t0 = Clock::now();
  double secs = 0;
  std::optional<HeartbeatFailure> f = wait_failure(*hb0, t0, &secs);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->why, "the coordinator's store stopped answering for 1 s");
  EXPECT_TRUE(f->store_lost);  // nobody can be told through it
  EXPECT_GE(secs, 0.75);
  EXPECT_LE(secs, 1.4 + 1.0);
}

}  // namespace
}  // namespace partrain::agent
