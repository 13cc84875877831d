// The in-process plugin tests' group: a rendezvous server on loopback and one thread per
// rank, each running `rank_fn(rank, port)` (it connects with the same secret, makes its
// Gloo group with connect_thread_rank and drives the plugin), joined before the results are
// read, e.g.
//
//   std::array<RankResult, 3> results;
//   run_thread_ranks(3, kSecret, [&](int r, int port) { run_rank(r, port, api, &results[r]); });
#pragma once

#include <chrono>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "comm/gloo/gloo_communicator.h"
#include "comm/rendezvous/client.h"
#include "comm/rendezvous/server.h"

namespace partrain::testing {

template <typename RankFn>
void run_thread_ranks(int ranks, const std::string& secret, RankFn rank_fn) {
  comm::RendezvousServerOptions so;
  so.host = "127.0.0.1";
  auto server = comm::RendezvousServer::start(secret, so);
  ASSERT_TRUE(server.is_ok()) << server.status().message();
  const int port = (*server)->port();
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) threads.emplace_back(rank_fn, r, port);
  for (std::thread& t : threads) t.join();
}

// One thread rank's end of the group: its rendezvous client (kept while the group lives) and
// its Gloo communicator `group` over ranks 0 .. ranks-1.
struct ThreadRank {
  std::unique_ptr<comm::RendezvousClient> store;
  std::unique_ptr<comm::Communicator> comm;
};

inline Result<ThreadRank> connect_thread_rank(int rank, int port, const std::string& secret, const std::string& group,
                                              int ranks = 3) {
  ThreadRank out;
  Result<std::unique_ptr<comm::RendezvousClient>> store = comm::RendezvousClient::connect("127.0.0.1", port, secret);
  if (!store) return store.status();
  out.store = std::move(store).value();
  comm::GlooOptions go;
  go.host = "127.0.0.1";
  go.connect_timeout = std::chrono::seconds(20);
  std::vector<int> members(static_cast<size_t>(ranks));
  std::iota(members.begin(), members.end(), 0);
  Result<std::unique_ptr<comm::Communicator>> c =
      comm::create_gloo_communicator(comm::GroupSpec{group, members, rank}, *out.store, go);
  if (!c) return c.status();
  out.comm = std::move(c).value();
  return out;
}

}  // namespace partrain::testing
