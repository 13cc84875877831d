// Multi-process tests of the Gloo communicator on localhost: an in-process rendezvous server
// on an ephemeral port, N comm_worker processes that check every collective exactly.
#include <chrono>

#include <gtest/gtest.h>

#include "comm/gloo/gloo_communicator.h"
#include "comm/rendezvous/client.h"
#include "comm/rendezvous/server.h"
#include "spawn.h"

namespace partrain::comm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kSecret = "collectives-test-secret-0123456789";

// Runs MODE on `world` workers; returns their exits and the wall time in seconds.
std::vector<testing::WorkerExit> run(const std::string& mode, int world, double* seconds) {
  RendezvousServerOptions options;
  options.host = "127.0.0.1";
  auto server = RendezvousServer::start(kSecret, options);
  EXPECT_TRUE(server.is_ok()) << server.status().message();
  if (!server) return {};
  auto start = Clock::now();
  auto exits = testing::run_workers(mode, world, (*server)->port(), kSecret, std::chrono::seconds(25));
  *seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return exits;
}

void expect_all_ok(const std::vector<testing::WorkerExit>& exits) {
  for (size_t r = 0; r < exits.size(); ++r) {
    EXPECT_FALSE(exits[r].timed_out) << "rank " << r << " hung";
    EXPECT_TRUE(exits[r].exited_ok()) << "rank " << r << " failed (status " << exits[r].status << "); see its stderr";
  }
}

TEST(GlooCollectives, World2EveryCollectiveExact) {
  double secs = 0;
  auto exits = run("collectives", 2, &secs);
  ASSERT_EQ(exits.size(), 2u);
  expect_all_ok(exits);
}

TEST(GlooCollectives, World3EveryCollectiveExact) {
  double secs = 0;
  auto exits = run("collectives", 3, &secs);
  ASSERT_EQ(exits.size(), 3u);
  expect_all_ok(exits);
}

// World 4 also builds strided {0,2},{1,3}, consecutive {0,1},{2,3}, an out-of-order trio
// {3,1,2} without rank 0, and single-rank groups, and checks everything on each.
TEST(GlooCollectives, World4SubGroupsEveryCollectiveExact) {
  double secs = 0;
  auto exits = run("collectives", 4, &secs);
  ASSERT_EQ(exits.size(), 4u);
  expect_all_ok(exits);
}

TEST(GlooCollectives, AbortFailsBlockedOperationsPromptly) {
  double secs = 0;
  auto exits = run("abort", 2, &secs);
  ASSERT_EQ(exits.size(), 2u);
  expect_all_ok(exits);
  EXPECT_LT(secs, 8.0);
}

TEST(GlooCollectives, DeadPeerFailsTheCollectiveInsteadOfHanging) {
  double secs = 0;
  auto exits = run("peer_death", 3, &secs);
  ASSERT_EQ(exits.size(), 3u);
  EXPECT_TRUE(exits[0].exited_ok()) << "status " << exits[0].status;
  EXPECT_TRUE(exits[1].exited_ok()) << "status " << exits[1].status;
  EXPECT_TRUE(exits[2].killed_by(SIGKILL)) << "status " << exits[2].status;
  EXPECT_LT(secs, 10.0);
}

// A member that never arrives makes creation fail after connect_timeout, naming the group
// and what is missing, instead of hanging.
TEST(GlooCollectives, MissingMemberFailsCreationWithinConnectTimeout) {
  RendezvousServerOptions so;
  so.host = "127.0.0.1";
  auto server = RendezvousServer::start(kSecret, so);
  ASSERT_TRUE(server.is_ok());
  auto store = RendezvousClient::connect("127.0.0.1", (*server)->port(), kSecret);
  ASSERT_TRUE(store.is_ok()) << store.status().message();
  GlooOptions options;
  options.host = "127.0.0.1";
  options.connect_timeout = std::chrono::milliseconds(300);
  auto start = Clock::now();
  auto comm = create_gloo_communicator(GroupSpec{"lonely", {0, 1}, 0}, **store, options);
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_FALSE(comm.is_ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(comm.status().message().find("lonely"), std::string::npos) << comm.status().message();
  EXPECT_NE(comm.status().message().find("missing: gloo/lonely/main/1"), std::string::npos) << comm.status().message();
  EXPECT_LT(secs, 3.0);
  // A bad spec is refused before any connection.
  auto bad = create_gloo_communicator(GroupSpec{"bad", {0, 1, 1}, 0}, **store, options);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  auto outsider = create_gloo_communicator(GroupSpec{"dp0", {1, 2}, 0}, **store, options);
  ASSERT_FALSE(outsider.is_ok());
  EXPECT_NE(outsider.status().message().find("not a member"), std::string::npos);
}

}  // namespace
}  // namespace partrain::comm
