// partrain's Gloo all-reduce on loopback: WORLD processes (this program started again per
// rank) in one group, float32 sums of 1 MiB and 64 MiB, the mean time of 50 and 5
// iterations after a warm-up. Rank 0 prints one line per size for allreduce_vs_torch.sh,
//
//   all_reduce BYTES WORLD MS
//
// and a probe that a run of reduce-scatters does not slow the all-reduces after it:
//
//   probe BEFORE_MS AFTER_MS
//
// Usage: partrain_allreduce_bench [WORLD]      (default 2; ranks are started by it)
// Not a test: it checks nothing but that every operation succeeded.
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "comm/communicator.h"
#include "comm/gloo/gloo_communicator.h"
#include "comm/rendezvous/client.h"
#include "comm/rendezvous/secret.h"
#include "comm/rendezvous/server.h"

extern char** environ;

namespace pc = partrain::comm;
using Clock = std::chrono::steady_clock;

namespace {

// Exits the rank with 1 on a failed operation (the parent reports it).
void must(const partrain::Status& s, const char* what) {
  if (!s.is_ok()) {
    fmt::print(stderr, "{}: {}\n", what, s.message());
    std::exit(1);
  }
}

// Mean seconds of `iters` all-reduces of `data`.
double time_all_reduce(pc::Communicator& c, std::vector<float>& data, int iters) {
  const auto start = Clock::now();
  for (int i = 0; i < iters; ++i) must(c.all_reduce(data.data(), data.size(), pc::ReduceOp::kSum)->wait(), "all_reduce");
  return std::chrono::duration<double>(Clock::now() - start).count() / iters;
}

int run_rank(int rank, int world, int port) {
  auto secret = pc::secret_from_env();
  must(secret.status(), "secret");
  auto store = pc::RendezvousClient::connect("127.0.0.1", port, *secret);
  must(store.status(), "rendezvous");
  std::vector<int> all(static_cast<size_t>(world));
  for (int i = 0; i < world; ++i) all[static_cast<size_t>(i)] = i;
  pc::GlooOptions options;
  options.host = "127.0.0.1";
  auto comm = pc::create_gloo_communicator(pc::GroupSpec{"bench", all, rank}, **store, options);
  must(comm.status(), "gloo group");
  pc::Communicator& c = **comm;
  for (const size_t bytes : {size_t{1} << 20, size_t{64} << 20}) {
    std::vector<float> data(bytes / sizeof(float), 1.0f);
    must(c.all_reduce(data.data(), data.size(), pc::ReduceOp::kSum)->wait(), "warm-up");
    must(c.barrier()->wait(), "barrier");
    const double secs = time_all_reduce(c, data, bytes < (size_t{8} << 20) ? 50 : 5);
    if (rank == 0) fmt::print("all_reduce {} {} {:.4f}\n", bytes, world, secs * 1e3);
  }
  // Reduce-scatter has its own Gloo context: the all-reduces after a run of them must not slow.
  std::vector<float> small(size_t{1} << 18, 1.0f), shard(small.size() / static_cast<size_t>(world));
  const double before = time_all_reduce(c, small, 50);
  for (int i = 0; i < 20; ++i) {
    must(c.reduce_scatter(small.data(), shard.data(), shard.size(), pc::ReduceOp::kSum)->wait(), "reduce_scatter");
  }
  const double after = time_all_reduce(c, small, 50);
  if (rank == 0) fmt::print("probe {:.4f} {:.4f}\n", before * 1e3, after * 1e3);
  return 0;
}

// Serves the rendezvous, starts WORLD ranks of this program and waits for them.
int run_all(const char* self, int world) {
  auto secret = pc::generate_secret();
  must(secret.status(), "secret");
  pc::RendezvousServerOptions so;
  so.host = "127.0.0.1";
  auto server = pc::RendezvousServer::start(*secret, so);
  must(server.status(), "rendezvous server");
  ::setenv(pc::kJobSecretEnv, secret->c_str(), 1);
  std::fflush(stdout);
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> args = {self, "--rank", std::to_string(r), std::to_string(world),
                                     std::to_string((*server)->port())};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    if (::posix_spawn(&pid, self, nullptr, nullptr, argv.data(), environ) != 0) {
      fmt::print(stderr, "cannot start rank {} ({})\n", r, self);
      return 1;
    }
    pids.push_back(pid);
  }
  int failed = 0;
  for (const pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    failed += WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
  }
  if (failed > 0) fmt::print(stderr, "{} of {} ranks failed\n", failed, world);
  return failed > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--rank") {
    return run_rank(std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]));
  }
  const int world = argc > 1 ? std::atoi(argv[1]) : 2;
  if (argc > 2 || world < 2 || world > 64) {
    fmt::print(stderr, "usage: partrain_allreduce_bench [WORLD]   (2 to 64 ranks; default 2)\n");
    return 2;
  }
  return run_all("/proc/self/exe", world);
}
