// Rendezvous time against the number of ranks: a RendezvousServer in a process of its own
// (the coordinator), and N simulated ranks on loopback, driven by event loops in D driver
// processes (a rank is a socket and a state machine, not a thread). Each rank does what a
// rank of a job does at start-up:
//
//   connect, authenticate (auth.h: greeting, hello, proof, verdict), SET addr/<r>,
//   BARRIER "start" of N, GET addr/<r+1 mod N>
//
// and the time is from the first connect to the last rank's GET answered. A rank whose
// connection the server closed during the handshake (it took longer than the server's
// handshake_timeout) connects again, as RendezvousClient::connect does; those are counted.
// Prints one line per rank count: seconds, microseconds per rank, reconnects, the server's
// threads and peak RSS.
//
//   rendezvous_bench [N...]      default: 1024 4096 16384
//
// Bounded: every scale has 60 s; drivers hold at most 4096 sockets each (RLIMIT_NOFILE).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "comm/rendezvous/auth.h"
#include "comm/rendezvous/server.h"
#include "comm/rendezvous/wire.h"

namespace {

using namespace partrain::comm;
using Clock = std::chrono::steady_clock;
constexpr const char* kSecret = "bench-secret-0123456789abcdef0123456789";
constexpr int kPerDriver = 4096;
constexpr double kLimitSeconds = 60;

void raise_files() {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
}

std::string proc_field(pid_t pid, const char* key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) == 0) {
      std::istringstream f(line.substr(std::strlen(key)));
      std::string v;
      f >> v;
      return v;
    }
  }
  return "?";
}

// One simulated rank.
struct Rank {
  enum Phase { kConnecting, kHello, kVerdict, kSet, kBarrier, kGet, kDone } phase = kConnecting;
  int fd = -1, r = 0;
  std::string in, out;
  auth::Nonce nc{}, ns{};
};

uint32_t u32(const std::string& s) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(s[static_cast<size_t>(i)])) << (8 * i);
  return v;
}

// Drives ranks [first, first + count) of `world`; exits 0 when all are done and writes the
// number of reconnects to `report`.
int drive(int port, int first, int count, int world, int report) {
  const int ep = epoll_create1(0);
  std::vector<Rank> ranks(static_cast<size_t>(count));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  auto open_rank = [&](int i) {
    Rank& k = ranks[static_cast<size_t>(i)];
    k = Rank{};
    k.r = first + i;
    k.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(k.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(k.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS) {
      std::perror("connect");
      return false;
    }
    epoll_event ev{};
    ev.events = EPOLLOUT;  // connected: then the greeting
    ev.data.u32 = static_cast<uint32_t>(i);
    epoll_ctl(ep, EPOLL_CTL_ADD, k.fd, &ev);
    return true;
  };
  for (int i = 0; i < count; ++i) {
    if (!open_rank(i)) return 1;
  }
  int reconnects = 0;
  auto send_all = [](Rank& k, const std::string& bytes) {
    size_t at = 0;
    while (at < bytes.size()) {
      const ssize_t n = send(k.fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
      if (n > 0) at += static_cast<size_t>(n);
      else if (errno != EAGAIN && errno != EINTR) return false;
    }
    return true;
  };
  auto request = [&](Rank& k, wire::Op op, std::vector<std::string> fields) {
    return send_all(k, wire::encode(wire::Frame{static_cast<uint8_t>(op), std::move(fields)}));
  };
  int done = 0;
  std::vector<epoll_event> events(1024);
  const auto start = Clock::now();
  while (done < count) {
    if (std::chrono::duration<double>(Clock::now() - start).count() > kLimitSeconds) return 3;
    const int n = epoll_wait(ep, events.data(), static_cast<int>(events.size()), 1000);
    for (int e = 0; e < n; ++e) {
      const int index = static_cast<int>(events[static_cast<size_t>(e)].data.u32);
      Rank& k = ranks[static_cast<size_t>(index)];
      if (k.phase == Rank::kConnecting) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(k.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        const auto greeting = auth::encode_greeting();
        if (err != 0 || !send_all(k, std::string(reinterpret_cast<const char*>(greeting.data()), greeting.size()))) {
          close(k.fd);  // refused (a full backlog): connect again
          ++reconnects;
          if (!open_rank(index)) return 1;
          continue;
        }
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u32 = static_cast<uint32_t>(index);
        epoll_ctl(ep, EPOLL_CTL_MOD, k.fd, &ev);
        k.phase = Rank::kHello;
        continue;
      }
      char buf[4096];
      const ssize_t got = recv(k.fd, buf, sizeof buf, 0);
      if (got <= 0) {
        if (got < 0 && errno == EAGAIN) continue;
        if (k.phase > Rank::kVerdict) {
          std::fprintf(stderr, "rank %d: connection closed in phase %d\n", k.r, k.phase);
          return 2;
        }
        close(k.fd);  // dropped in the handshake: connect again
        ++reconnects;
        if (!open_rank(index)) return 1;
        continue;
      }
      k.in.append(buf, static_cast<size_t>(got));
      bool progress = true;
      while (progress) {
        progress = false;
        if (k.phase == Rank::kHello && k.in.size() >= auth::kHelloBytes) {
          k.ns = *auth::decode_hello(reinterpret_cast<const uint8_t*>(k.in.data()));
          k.in.erase(0, auth::kHelloBytes);
          k.nc = *auth::random_nonce();
          const auto proof = auth::encode_proof(k.nc, auth::client_proof(kSecret, k.ns, k.nc));
          if (!send_all(k, std::string(reinterpret_cast<const char*>(proof.data()), proof.size()))) return 2;
          k.phase = Rank::kVerdict;
          progress = true;
        } else if (k.phase == Rank::kVerdict && k.in.size() >= auth::kVerdictBytes) {
          if (k.in[0] != 1) return 2;
          k.in.erase(0, auth::kVerdictBytes);
          request(k, wire::Op::kSet, {"addr/" + std::to_string(k.r), "10.0.0.1:" + std::to_string(20000 + k.r)});
          k.phase = Rank::kSet;
          progress = true;
        } else if (k.phase >= Rank::kSet && k.phase <= Rank::kGet && k.in.size() >= 4 &&
                   k.in.size() >= 4 + u32(k.in)) {
          const size_t len = 4 + u32(k.in);
          auto reply = wire::decode_body(std::string_view(k.in).substr(4, len - 4));
          k.in.erase(0, len);
          if (!reply || reply->code != static_cast<uint8_t>(wire::Reply::kOk)) return 2;
          if (k.phase == Rank::kSet) {
            request(k, wire::Op::kBarrier, {"start", wire::encode_i64(k.r), wire::encode_i64(world),
                                            wire::encode_i64(60000)});
            k.phase = Rank::kBarrier;
          } else if (k.phase == Rank::kBarrier) {
            request(k, wire::Op::kGet, {"addr/" + std::to_string((k.r + 1) % world), wire::encode_i64(60000)});
            k.phase = Rank::kGet;
          } else {
            k.phase = Rank::kDone;
            ++done;
            close(k.fd);
          }
          progress = k.phase != Rank::kDone;
        }
      }
    }
  }
  (void)!write(report, &reconnects, sizeof reconnects);
  return 0;
}

// One scale: the server process, the drivers, the time.
bool run_scale(int world) {
  int ready[2];
  if (pipe(ready) != 0) return false;
  const pid_t server = fork();
  if (server == 0) {
    raise_files();
    RendezvousServerOptions o;
    o.host = "127.0.0.1";
    auto s = RendezvousServer::start(kSecret, o);
    if (!s) _exit(1);
    const int port = (*s)->port();
    (void)!write(ready[1], &port, sizeof port);
    pause();
    _exit(0);
  }
  int port = 0;
  if (read(ready[0], &port, sizeof port) != sizeof port) return false;
  int reports[2];
  if (pipe(reports) != 0) return false;
  const auto t0 = Clock::now();
  std::vector<pid_t> drivers;
  for (int first = 0; first < world; first += kPerDriver) {
    const pid_t d = fork();
    if (d == 0) {
      raise_files();
      _exit(drive(port, first, std::min(kPerDriver, world - first), world, reports[1]));
    }
    drivers.push_back(d);
  }
  bool ok = true;
  for (pid_t d : drivers) {
    int status = 0;
    waitpid(d, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  close(reports[1]);
  int reconnects = 0;
  for (int n = 0; read(reports[0], &n, sizeof n) == sizeof n;) reconnects += n;
  close(reports[0]);
  const std::string threads = proc_field(server, "Threads:"), rss = proc_field(server, "VmHWM:");
  kill(server, SIGTERM);
  waitpid(server, nullptr, 0);
  close(ready[0]);
  close(ready[1]);
  if (!ok) {
    std::printf("%7d ranks: FAILED (a driver did not finish within %.0f s)\n", world, kLimitSeconds);
    return false;
  }
  std::printf("%7d ranks: %7.3f s  %7.1f us/rank  %5d reconnects  server threads %s  server peak RSS %s kB\n",
              world, secs, 1e6 * secs / world, reconnects, threads.c_str(), rss.c_str());
  std::fflush(stdout);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> scales;
  for (int i = 1; i < argc; ++i) scales.push_back(std::atoi(argv[i]));
  if (scales.empty()) scales = {1024, 4096, 16384};
  std::printf("partrain rendezvous: connect + authenticate + SET + BARRIER + GET per rank, loopback, "
              "%d ranks per driver process\n", kPerDriver);
  bool ok = true;
  for (int n : scales) ok = run_scale(n) && ok;
  return ok ? 0 : 1;
}
