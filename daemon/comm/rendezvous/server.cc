#include "comm/rendezvous/server.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <list>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "comm/rendezvous/auth.h"
#include "comm/rendezvous/wire.h"
#include "common/log.h"

namespace partrain::comm {
namespace {

constexpr std::string_view kLog = "rdzv";
// A GET or WAIT may not ask to block longer than this.
constexpr int64_t kMaxWaitMs = 24LL * 3600 * 1000;

using wire::Clock;
using wire::Frame;
using wire::Op;
using wire::Reply;

Frame reply(Reply code, std::vector<std::string> fields = {}) {
  return Frame{static_cast<uint8_t>(code), std::move(fields)};
}

}  // namespace

struct RendezvousServer::Impl {
  struct Connection {
    int fd = -1;
    std::string peer;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  std::string secret;
  RendezvousServerOptions options;
  int listen_fd = -1;
  int wake_pipe[2] = {-1, -1};
  int port = 0;
  std::thread accept_thread;
  std::atomic<bool> stopping{false};

  // The store itself and everyone waiting on it.
  std::mutex data_mu;
  std::condition_variable data_cv;
  std::unordered_map<std::string, std::string> data;

  std::mutex conn_mu;
  std::list<Connection> connections;

  mutable std::mutex stats_mu;
  RendezvousServerStats stats;

  void count(uint64_t RendezvousServerStats::*field) {
    std::lock_guard lock(stats_mu);
    ++(stats.*field);
  }

  Status listen_on() {
    struct addrinfo hints {};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    struct addrinfo* res = nullptr;
    std::string service = std::to_string(options.port);
    int rc = ::getaddrinfo(options.host.empty() ? nullptr : options.host.c_str(), service.c_str(), &hints, &res);
    if (rc != 0) {
      return Status::invalid(
          fmt::format("rendezvous host '{}' cannot be resolved: {}", options.host, gai_strerror(rc)));
    }
    std::string last_error = "no address";
    for (auto* ai = res; ai != nullptr; ai = ai->ai_next) {
      int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) continue;
      int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
        listen_fd = fd;
        break;
      }
      last_error = std::strerror(errno);
      ::close(fd);
    }
    ::freeaddrinfo(res);
    if (listen_fd < 0) {
      return Status::unavailable(fmt::format("cannot listen on {}:{}: {}; choose another port or port 0",
                                             options.host, options.port, last_error));
    }
    struct sockaddr_storage ss {};
    socklen_t len = sizeof(ss);
    ::getsockname(listen_fd, reinterpret_cast<struct sockaddr*>(&ss), &len);
    port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<struct sockaddr_in6*>(&ss)->sin6_port)
                                    : ntohs(reinterpret_cast<struct sockaddr_in*>(&ss)->sin_port);
    if (::pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
      return Status::io_error(fmt::format("cannot create a pipe: {}", std::strerror(errno)));
    }
    return Status::ok();
  }

  // Joins and closes connections whose thread has finished (or all, when `all`).
  void reap(bool all) {
    std::list<Connection> finished;
    {
      std::lock_guard lock(conn_mu);
      for (auto it = connections.begin(); it != connections.end();) {
        auto next = std::next(it);
        if (all || it->done.load()) finished.splice(finished.end(), connections, it);
        it = next;
      }
    }
    for (auto& c : finished) {
      if (all) ::shutdown(c.fd, SHUT_RDWR);
    }
    if (all) data_cv.notify_all();
    for (auto& c : finished) {
      if (c.thread.joinable()) c.thread.join();
      ::close(c.fd);
    }
  }

  void accept_loop() {
    while (!stopping.load()) {
      struct pollfd fds[2] = {{listen_fd, POLLIN, 0}, {wake_pipe[0], POLLIN, 0}};
      int rc = ::poll(fds, 2, 1000);
      reap(false);
      if (rc <= 0 || stopping.load()) continue;
      if (!(fds[0].revents & POLLIN)) continue;
      int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      count(&RendezvousServerStats::accepted);
      std::lock_guard lock(conn_mu);
      if (connections.size() >= options.max_connections) {
        log::warn(kLog, "refused connection from {}: {} connections already open (max_connections)",
                  wire::peer_name(fd), connections.size());
        ::close(fd);
        continue;
      }
      auto& c = connections.emplace_back();
      c.fd = fd;
      c.peer = wire::peer_name(fd);
      c.thread = std::thread([this, &c] {
        serve(c.fd, c.peer);
        // The peer sees EOF now; the descriptor itself is closed by reap(), after the join,
        // so stop() can never shut down a reused descriptor number.
        ::shutdown(c.fd, SHUT_RDWR);
        c.done.store(true);
      });
    }
  }

  // Runs the handshake; true when the client proved the secret.
  bool authenticate(int fd, const std::string& peer) {
    auto deadline = Clock::now() + options.handshake_timeout;
    auto nonce = auth::random_nonce();
    if (!nonce) {
      log::error(kLog, "dropped connection from {}: {}", peer, nonce.status().message());
      return false;
    }
    auto hello = auth::encode_hello(*nonce);
    if (!wire::write_all(fd, hello.data(), hello.size(), deadline)) return false;
    uint8_t proof[auth::kProofBytes];
    Status got = wire::read_exact(fd, proof, sizeof(proof), deadline);
    if (!got) {
      if (wire::is_timeout(got)) {
        count(&RendezvousServerStats::dropped_handshake_timeout);
        log::warn(kLog, "dropped connection from {}: no handshake within {} ms", peer,
                  options.handshake_timeout.count());
      } else {
        log::debug(kLog, "connection from {} closed during the handshake: {}", peer, got.message());
      }
      return false;
    }
    auth::Nonce client_nonce{};
    auth::Mac mac{};
    if (Status s = auth::decode_proof(proof, &client_nonce, &mac); !s) {
      count(&RendezvousServerStats::dropped_malformed);
      log::warn(kLog, "refused connection from {}: malformed handshake ({})", peer, s.message());
      return false;
    }
    if (!auth::mac_equal(mac, auth::client_proof(secret, *nonce, client_nonce))) {
      count(&RendezvousServerStats::refused_wrong_secret);
      log::warn(kLog, "refused connection from {}: wrong job secret", peer);
      uint8_t no = 0;
      (void)wire::write_all(fd, &no, 1, deadline);
      return false;
    }
    uint8_t verdict[auth::kVerdictBytes];
    verdict[0] = 1;
    auto server_mac = auth::server_proof(secret, *nonce, client_nonce);
    std::memcpy(verdict + 1, server_mac.data(), server_mac.size());
    if (!wire::write_all(fd, verdict, sizeof(verdict), deadline)) return false;
    count(&RendezvousServerStats::authenticated);
    return true;
  }

  void serve(int fd, const std::string& peer) {
    if (!authenticate(fd, peer)) return;
    log::debug(kLog, "client {} authenticated", peer);
    while (!stopping.load()) {
      auto request = wire::read_frame(fd, Clock::time_point::max(), options.frame_timeout);
      if (!request) {
        if (request.status().code() == StatusCode::kInvalidArgument || wire::is_timeout(request.status())) {
          count(&RendezvousServerStats::dropped_malformed);
          log::warn(kLog, "dropped connection from {}: malformed frame: {}", peer, request.status().message());
        }
        return;
      }
      Frame answer = handle(*request, fd);
      std::string bytes = wire::encode(answer);
      if (!wire::write_all(fd, bytes.data(), bytes.size(), Clock::now() + options.frame_timeout)) return;
      if (answer.code == static_cast<uint8_t>(Reply::kBadRequest)) {
        count(&RendezvousServerStats::dropped_malformed);
        log::warn(kLog, "dropped connection from {}: malformed request: {}",
                  peer, answer.fields.empty() ? "" : answer.fields[0]);
        return;
      }
    }
  }

  static Frame bad(std::string why) { return reply(Reply::kBadRequest, {std::move(why)}); }

  static Status check_keys(const std::vector<std::string>& keys, size_t first) {
    for (size_t i = first; i < keys.size(); ++i) {
      if (keys[i].empty() || keys[i].size() > wire::kMaxKeyBytes) {
        return Status::invalid(fmt::format("key of {} bytes (allowed 1..{})", keys[i].size(), wire::kMaxKeyBytes));
      }
    }
    return Status::ok();
  }

  Result<Clock::time_point> deadline_from(const std::string& field) {
    auto ms = wire::decode_i64(field);
    if (!ms) return ms.status();
    if (*ms < 0 || *ms > kMaxWaitMs) return Status::invalid(fmt::format("timeout of {} ms out of range", *ms));
    return Clock::now() + std::chrono::milliseconds(*ms);
  }

  // Waits on the store until `ready()` or `deadline`, giving up early when the client hangs
  // up, so a dead client's long wait does not hold its thread. True when ready.
  template <typename Pred>
  bool wait_for_data(std::unique_lock<std::mutex>& lock, int fd, Clock::time_point deadline, Pred ready) {
    for (;;) {
      auto slice = std::min(deadline, Clock::now() + std::chrono::milliseconds(500));
      if (data_cv.wait_until(lock, slice, [&] { return stopping.load() || ready(); })) return !stopping.load();
      if (Clock::now() >= deadline) return false;
      struct pollfd p {fd, POLLRDHUP, 0};
      if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) return false;
    }
  }

  Frame handle(const Frame& req, int fd) {
    const auto& f = req.fields;
    switch (static_cast<Op>(req.code)) {
      case Op::kSet: {
        if (f.size() != 2) return bad("SET takes key and value");
        if (Status s = check_keys({f[0]}, 0); !s) return bad(s.message());
        {
          std::lock_guard lock(data_mu);
          data[f[0]] = f[1];
        }
        data_cv.notify_all();
        return reply(Reply::kOk);
      }
      case Op::kGet: {
        if (f.size() != 2) return bad("GET takes key and timeout");
        if (Status s = check_keys({f[0]}, 0); !s) return bad(s.message());
        auto deadline = deadline_from(f[1]);
        if (!deadline) return bad(deadline.status().message());
        std::unique_lock lock(data_mu);
        if (!wait_for_data(lock, fd, *deadline, [&] { return data.count(f[0]) > 0; })) return reply(Reply::kTimeout);
        return reply(Reply::kOk, {data[f[0]]});
      }
      case Op::kAdd: {
        if (f.size() != 2) return bad("ADD takes key and delta");
        if (Status s = check_keys({f[0]}, 0); !s) return bad(s.message());
        auto delta = wire::decode_i64(f[1]);
        if (!delta) return bad(delta.status().message());
        int64_t value = 0;
        {
          std::lock_guard lock(data_mu);
          auto it = data.find(f[0]);
          if (it != data.end()) {
            auto old = wire::decode_i64(it->second);
            if (!old) return bad(fmt::format("ADD on key '{}' that holds a non-counter value", f[0]));
            value = *old;
          }
          value += *delta;
          data[f[0]] = wire::encode_i64(value);
        }
        data_cv.notify_all();
        return reply(Reply::kOk, {wire::encode_i64(value)});
      }
      case Op::kDelete: {
        if (f.size() != 1) return bad("DELETE takes one key");
        std::lock_guard lock(data_mu);
        bool existed = data.erase(f[0]) > 0;
        return reply(Reply::kOk, {wire::encode_i64(existed ? 1 : 0)});
      }
      case Op::kWait: {
        if (f.empty()) return bad("WAIT takes a timeout and keys");
        if (Status s = check_keys(f, 1); !s) return bad(s.message());
        auto deadline = deadline_from(f[0]);
        if (!deadline) return bad(deadline.status().message());
        std::unique_lock lock(data_mu);
        auto all_there = [&] {
          for (size_t i = 1; i < f.size(); ++i) {
            if (data.count(f[i]) == 0) return false;
          }
          return true;
        };
        return reply(wait_for_data(lock, fd, *deadline, all_there) ? Reply::kOk : Reply::kTimeout);
      }
      case Op::kCheck: {
        if (Status s = check_keys(f, 0); !s) return bad(s.message());
        std::lock_guard lock(data_mu);
        bool all = true;
        for (const auto& k : f) all = all && data.count(k) > 0;
        return reply(Reply::kOk, {wire::encode_i64(all ? 1 : 0)});
      }
    }
    return bad(fmt::format("unknown request code {}", req.code));
  }
};

RendezvousServer::RendezvousServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RendezvousServer::~RendezvousServer() { stop(); }

Result<std::unique_ptr<RendezvousServer>> RendezvousServer::start(std::string secret, RendezvousServerOptions options) {
  if (secret.empty()) return Status::invalid("the rendezvous server needs a job secret");
  auto impl = std::make_unique<Impl>();
  impl->secret = std::move(secret);
  impl->options = std::move(options);
  if (Status s = impl->listen_on(); !s) {
    if (impl->listen_fd >= 0) ::close(impl->listen_fd);
    return s;
  }
  Impl* raw = impl.get();
  raw->accept_thread = std::thread([raw] { raw->accept_loop(); });
  log::info(kLog, "rendezvous store listening on {}:{}", raw->options.host, raw->port);
  return std::unique_ptr<RendezvousServer>(new RendezvousServer(std::move(impl)));
}

int RendezvousServer::port() const { return impl_->port; }

RendezvousServerStats RendezvousServer::stats() const {
  RendezvousServerStats out;
  {
    std::lock_guard lock(impl_->stats_mu);
    out = impl_->stats;
  }
  std::lock_guard lock(impl_->conn_mu);
  out.open_connections = 0;
  for (const auto& c : impl_->connections) out.open_connections += c.done.load() ? 0 : 1;
  return out;
}

void RendezvousServer::stop() {
  if (!impl_ || impl_->stopping.exchange(true)) return;
  char byte = 1;
  (void)!::write(impl_->wake_pipe[1], &byte, 1);
  if (impl_->accept_thread.joinable()) impl_->accept_thread.join();
  {
    std::lock_guard lock(impl_->data_mu);  // no waiter may miss the wake-up below
  }
  impl_->reap(true);
  ::close(impl_->listen_fd);
  ::close(impl_->wake_pipe[0]);
  ::close(impl_->wake_pipe[1]);
}

}  // namespace partrain::comm
