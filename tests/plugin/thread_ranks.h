// The in-process plugin tests' group: a rendezvous server on loopback and one thread per
// rank, each running `rank_fn(rank, port)` (it connects with the same secret, makes its
// Gloo group and drives the plugin), joined before the results are read, e.g.
//
//   std::array<RankResult, 3> results;
//   run_thread_ranks(3, kSecret, [&](int r, int port) { run_rank(r, port, api, &results[r]); });
#pragma once

#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

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

}  // namespace partrain::testing
