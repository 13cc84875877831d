// The rendezvous server's event loop (see server.h). One thread: epoll over the listening
// socket, a wake-up eventfd and every connection (non-blocking), and a heap of deadlines.
// A connection goes through three phases: kGreeting (waiting for the client's greeting),
// kProof (hello sent, waiting for the client's proof) and kReady (requests, one at a time,
// answered by the KvStore or parked in it). A
// connection marked closing is closed once its last reply is out.
#include "comm/rendezvous/server.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <list>
#include <queue>
#include <thread>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "comm/rendezvous/auth.h"
#include "comm/rendezvous/kv_store.h"
#include "comm/rendezvous/log_limiter.h"
#include "comm/rendezvous/wire.h"
#include "common/log.h"

namespace partrain::comm {
namespace {

constexpr std::string_view kLog = "rdzv";
constexpr uint64_t kListenId = 0, kWakeId = 1;  // epoll ids; connections count from 2
constexpr size_t kReadChunk = 64 << 10;
constexpr int kAcceptBatch = 256;
// A connection with this much reply still unsent gets no further request served until it
// reads what it was sent.
constexpr size_t kOutputHighWater = 1 << 20;

using wire::Clock;
using wire::Frame;

uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

// The process may open as many files as its hard limit allows: 16k ranks are 16k sockets.
size_t raise_open_file_limit() {
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  return rl.rlim_cur == RLIM_INFINITY ? size_t{1} << 20 : static_cast<size_t>(rl.rlim_cur);
}

}  // namespace

struct RendezvousServer::Impl {
  enum class Phase { kGreeting, kProof, kReady };
  enum class Deadline { kNone, kHandshake, kFrame, kParked };

  struct Conn {
    uint64_t id = 0;
    int fd = -1;
    std::string peer;
    Phase phase = Phase::kGreeting;
    auth::Nonce nonce{};
    std::string in;       // received, not yet consumed (from in_at)
    size_t in_at = 0;
    std::string out;      // to send (from out_at)
    size_t out_at = 0;
    bool writing = false;  // EPOLLOUT registered
    bool closing = false;  // close once `out` is sent
    bool parked = false;   // a request waits in the store
    Deadline kind = Deadline::kNone;
    Clock::time_point deadline{};
    uint64_t deadline_gen = 0;
    std::list<uint64_t>::iterator waiting;  // in `handshakes` until phase == kReady
    size_t buffered() const { return (in.size() - in_at) + (out.size() - out_at); }
  };
  struct Timer {
    Clock::time_point at;
    uint64_t id, gen;
    bool operator>(const Timer& o) const { return at > o.at; }
  };

  explicit Impl(std::string s, RendezvousServerOptions o)
      : secret(std::move(s)), options(std::move(o)), store(options.max_store_bytes),
        limiter(kLogBurst, options.log_window) {}

  std::string secret;
  RendezvousServerOptions options;
  KvStore store;
  LogLimiter limiter;
  size_t max_connections = 0;
  int listen_fd = -1, epoll_fd = -1, wake_fd = -1;
  int port = 0;
  std::thread thread;
  std::atomic<bool> stopping{false};
  uint64_t next_id = 2;
  std::unordered_map<uint64_t, Conn> conns;
  std::list<uint64_t> handshakes;  // connections in their handshake, oldest first
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers;
  // Connections that may have requests to serve now (a parked request answered, replies
  // drained): served by the loop, never from inside another connection's handling, so no
  // chain of clients can grow the stack.
  std::deque<uint64_t> runnable;
  size_t buffered = 0;
  Clock::time_point accept_paused_until{};

  // Counters (read by stats() from other threads).
  std::atomic<uint64_t> n_open{0}, n_accepted{0}, n_authenticated{0}, n_wrong_secret{0}, n_handshake_timeout{0},
      n_malformed{0}, n_over_capacity{0}, n_quota{0}, n_buffered{0}, n_suppressed{0};

  // ---- Set-up.

  Status listen_on() {
    struct addrinfo hints {};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    struct addrinfo* res = nullptr;
    const std::string service = std::to_string(options.port);
    const int rc = ::getaddrinfo(options.host.empty() ? nullptr : options.host.c_str(), service.c_str(), &hints, &res);
    if (rc != 0) {
      return Status::invalid(fmt::format("rendezvous host '{}' cannot be resolved: {}", options.host, gai_strerror(rc)));
    }
    std::string last_error = "no address";
    for (auto* ai = res; ai != nullptr; ai = ai->ai_next) {
      const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
      if (fd < 0) continue;
      int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 65535) == 0) {
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
    epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
    wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (epoll_fd < 0 || wake_fd < 0) return Status::io_error(fmt::format("epoll/eventfd: {}", std::strerror(errno)));
    watch(listen_fd, kListenId, EPOLLIN, EPOLL_CTL_ADD);
    watch(wake_fd, kWakeId, EPOLLIN, EPOLL_CTL_ADD);
    const size_t files = raise_open_file_limit();
    max_connections = options.max_connections > 0 ? options.max_connections : (files > 128 ? files - 64 : 64);
    return Status::ok();
  }

  void watch(int fd, uint64_t id, uint32_t events, int op) {
    struct epoll_event ev {};
    ev.events = events;
    ev.data.u64 = id;
    ::epoll_ctl(epoll_fd, op, fd, &ev);
  }

  // ---- The loop.

  void loop() {
    std::vector<struct epoll_event> events(512);
    while (!stopping.load()) {
      const int n = ::epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), wait_ms());
      for (int i = 0; i < n && !stopping.load(); ++i) {
        const uint64_t id = events[static_cast<size_t>(i)].data.u64;
        const uint32_t ev = events[static_cast<size_t>(i)].events;
        if (id == kListenId) {
          accept_all();
        } else if (id != kWakeId) {
          on_event(id, ev);
        }
      }
      const auto now = Clock::now();
      run_timers(now);
      while (!runnable.empty()) {
        auto it = conns.find(runnable.front());
        runnable.pop_front();
        if (it != conns.end()) serve_requests(it->second);
      }
      if (accept_paused_until != Clock::time_point{} && now >= accept_paused_until) {
        accept_paused_until = {};
        watch(listen_fd, kListenId, EPOLLIN, EPOLL_CTL_MOD);
      }
      if (std::string s = limiter.take_summary(now); !s.empty()) log::warn(kLog, "{}", s);
      n_buffered.store(buffered);
      n_suppressed.store(limiter.suppressed_total());
    }
    for (auto& [id, c] : conns) ::close(c.fd);
    conns.clear();
  }

  // Until the next deadline, but at least once a second (the log summary, paused accepts).
  int wait_ms() {
    int ms = 1000;
    while (!timers.empty()) {
      const Timer& t = timers.top();
      auto it = conns.find(t.id);
      if (it == conns.end() || it->second.deadline_gen != t.gen) {
        timers.pop();
        continue;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t.at - Clock::now()).count() + 1;
      ms = static_cast<int>(std::clamp<int64_t>(left, 0, ms));
      break;
    }
    return ms;
  }

  void set_deadline(Conn& c, Deadline kind, Clock::time_point at) {
    c.kind = kind;
    c.deadline = at;
    ++c.deadline_gen;
    if (kind == Deadline::kNone) return;
    timers.push(Timer{at, c.id, c.deadline_gen});
    // Replaced deadlines stay in the heap until they come up; rebuilt from the live ones
    // when they outnumber the connections, so the heap never outgrows them by much.
    if (timers.size() > 4 * conns.size() + 1024) {
      std::vector<Timer> live;
      for (const auto& [id, k] : conns) {
        if (k.kind != Deadline::kNone) live.push_back(Timer{k.deadline, id, k.deadline_gen});
      }
      timers = decltype(timers)(std::greater<>(), std::move(live));
    }
  }

  void run_timers(Clock::time_point now) {
    while (!timers.empty() && timers.top().at <= now) {
      const Timer t = timers.top();
      timers.pop();
      auto it = conns.find(t.id);
      if (it == conns.end() || it->second.deadline_gen != t.gen) continue;
      Conn& c = it->second;
      switch (c.kind) {
        case Deadline::kHandshake:
          ++n_handshake_timeout;
          refusal("no handshake", "dropped connection from {}: no handshake within {} ms", c.peer,
                  options.handshake_timeout.count());
          close(c);
          break;
        case Deadline::kFrame:
          ++n_malformed;
          refusal("malformed", "dropped connection from {}: malformed frame: its bytes did not arrive within {} ms",
                  c.peer, options.frame_timeout.count());
          close(c);
          break;
        case Deadline::kParked:
          store.cancel(c.id);
          c.parked = false;
          set_deadline(c, Deadline::kNone, {});
          if (send(c, Frame{static_cast<uint8_t>(wire::Reply::kTimeout), {}})) runnable.push_back(c.id);
          break;
        case Deadline::kNone:
          break;
      }
    }
  }

  template <typename... Args>
  void refusal(std::string_view kind, fmt::format_string<Args...> f, Args&&... args) {
    if (limiter.allow(kind, Clock::now())) log::warn(kLog, f, std::forward<Args>(args)...);
  }

  // ---- Connections come and go.

  // Up to kAcceptBatch at a time, then the loop reads: a burst of 16k connects must not
  // keep the first clients' proofs waiting behind the last accepts.
  void accept_all() {
    for (int accepted = 0; accepted < kAcceptBatch; ++accepted) {
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if ((errno == EMFILE || errno == ENFILE) && evict_oldest_handshake("no file descriptor left")) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          refusal("over capacity", "cannot accept connections for now: {}", std::strerror(errno));
          // Level-triggered: stop watching the socket a moment instead of spinning on it.
          watch(listen_fd, kListenId, 0, EPOLL_CTL_MOD);
          accept_paused_until = Clock::now() + std::chrono::milliseconds(100);
        }
        return;
      }
      ++n_accepted;
      if (conns.size() >= max_connections && !evict_oldest_handshake("max_connections reached")) {
        ++n_over_capacity;
        refusal("over capacity", "refused connection from {}: {} connections already open (max_connections)",
                wire::peer_name(fd), conns.size());
        ::close(fd);
        continue;
      }
      if (options.max_handshakes > 0 && handshakes.size() >= options.max_handshakes) {
        evict_oldest_handshake("max_handshakes reached");
      }
      open(fd);
    }
  }

  bool evict_oldest_handshake(const char* why) {
    if (handshakes.empty()) return false;
    Conn& c = conns.at(handshakes.front());
    ++n_over_capacity;
    refusal("over capacity", "dropped connection from {} in its handshake: {}", c.peer, why);
    close(c);
    return true;
  }

  void open(int fd) {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Result<auth::Nonce> nonce = auth::random_nonce();
    if (!nonce) {
      log::error(kLog, "dropped a connection: {}", nonce.status().message());
      ::close(fd);
      return;
    }
    const uint64_t id = next_id++;
    Conn& c = conns[id];
    c.id = id;
    c.fd = fd;
    c.peer = wire::peer_name(fd);
    c.nonce = *nonce;
    c.waiting = handshakes.insert(handshakes.end(), id);
    ++n_open;
    watch(fd, id, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_ADD);
    set_deadline(c, Deadline::kHandshake, Clock::now() + options.handshake_timeout);
  }

  void close(Conn& c) {
    ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
    ::close(c.fd);
    if (c.parked) store.cancel(c.id);
    if (c.phase != Phase::kReady) handshakes.erase(c.waiting);
    buffered -= c.buffered();
    --n_open;
    conns.erase(c.id);
  }

  // ---- Bytes in and out.

  void on_event(uint64_t id, uint32_t ev) {
    auto it = conns.find(id);
    if (it == conns.end()) return;
    Conn& c = it->second;
    if (ev & EPOLLOUT) {
      if (!flush(c)) return;
      if (c.out_at == c.out.size()) runnable.push_back(id);  // caught up: requests may wait
    }
    if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) read_some(c);
  }

  // Reads what the socket has (only the proof's bytes during the handshake), then serves.
  void read_some(Conn& c) {
    const uint64_t id = c.id;
    char buf[kReadChunk];
    for (size_t total = 0; total < 16 * kReadChunk;) {
      size_t want = sizeof buf;
      if (c.phase == Phase::kGreeting) want = auth::kGreetingBytes - (c.in.size() - c.in_at);
      if (c.phase == Phase::kProof) want = auth::kProofBytes - (c.in.size() - c.in_at);
      if (want == 0) break;
      const ssize_t n = ::recv(c.fd, buf, want, 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        if (c.phase != Phase::kReady) log::debug(kLog, "connection from {} closed during the handshake", c.peer);
        close(c);
        return;
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        break;
      }
      c.in.append(buf, static_cast<size_t>(n));
      buffered += static_cast<size_t>(n);
      total += static_cast<size_t>(n);
      if (buffered > options.max_buffered_bytes) {
        ++n_quota;
        refusal("over quota", "dropped connection from {}: {} bytes of requests and replies are buffered "
                "(max_buffered_bytes {})", c.peer, buffered, options.max_buffered_bytes);
        close(c);
        return;
      }
    }
    if (c.phase == Phase::kGreeting && !greeting(c)) return;
    if (c.phase == Phase::kProof && !handshake(c)) return;
    if (conns.count(id) != 0) serve_requests(c);
  }

  // The client's greeting, once all of it is here: the hello with the server's nonce
  // follows. False when the connection was closed.
  bool greeting(Conn& c) {
    if (c.in.size() - c.in_at < auth::kGreetingBytes) return true;
    uint8_t greet[auth::kGreetingBytes];
    std::memcpy(greet, c.in.data() + c.in_at, sizeof greet);
    consume(c, auth::kGreetingBytes);
    if (Status s = auth::check_greeting(greet); !s) {
      ++n_malformed;
      refusal("malformed", "refused connection from {}: malformed handshake ({})", c.peer, s.message());
      close(c);
      return false;
    }
    c.phase = Phase::kProof;
    const auto hello = auth::encode_hello(c.nonce);
    return queue(c, std::string(reinterpret_cast<const char*>(hello.data()), hello.size()));
  }

  // The client's proof, once all of it is here; false when the connection was closed.
  bool handshake(Conn& c) {
    if (c.in.size() - c.in_at < auth::kProofBytes) return true;
    uint8_t proof[auth::kProofBytes];
    std::memcpy(proof, c.in.data() + c.in_at, sizeof proof);
    auth::Nonce client_nonce{};
    auth::Mac mac{};
    consume(c, auth::kProofBytes);
    handshakes.erase(c.waiting);
    c.phase = Phase::kReady;
    set_deadline(c, Deadline::kNone, {});
    if (Status s = auth::decode_proof(proof, &client_nonce, &mac); !s) {
      ++n_malformed;
      refusal("malformed", "refused connection from {}: malformed handshake ({})", c.peer, s.message());
      close(c);
      return false;
    }
    if (!auth::mac_equal(mac, auth::client_proof(secret, c.nonce, client_nonce))) {
      ++n_wrong_secret;
      refusal("wrong job secret", "refused connection from {}: wrong job secret", c.peer);
      c.closing = true;
      queue(c, std::string(1, '\0'));
      return false;
    }
    std::string verdict(1, '\1');
    const auth::Mac server_mac = auth::server_proof(secret, c.nonce, client_nonce);
    verdict.append(reinterpret_cast<const char*>(server_mac.data()), server_mac.size());
    ++n_authenticated;
    log::debug(kLog, "client {} authenticated", c.peer);
    return queue(c, std::move(verdict));
  }

  void consume(Conn& c, size_t n) {
    c.in_at += n;
    buffered -= n;
    if (c.in_at == c.in.size()) {
      c.in.clear();
      c.in_at = 0;
    } else if (c.in_at > (1 << 20) && c.in_at > c.in.size() / 2) {
      c.in.erase(0, c.in_at);
      c.in_at = 0;
    }
  }

  // Serves the complete requests buffered, one at a time, while none is parked and the
  // client reads its replies.
  void serve_requests(Conn& c) {
    const uint64_t id = c.id;
    while (conns.count(id) != 0 && c.phase == Phase::kReady && !c.parked && !c.closing &&
           c.out.size() - c.out_at < kOutputHighWater) {
      const size_t avail = c.in.size() - c.in_at;
      if (avail == 0) break;
      const uint32_t len = avail >= 4 ? get_u32(c.in.data() + c.in_at) : 0;
      if (len > wire::kMaxFrameBytes) {
        return malformed(c, fmt::format("frame of {} bytes exceeds the {} byte limit", len, wire::kMaxFrameBytes));
      }
      if (avail < 4 || avail < 4 + static_cast<size_t>(len)) {
        // A frame has begun: the rest must come within frame_timeout.
        if (c.kind != Deadline::kFrame) set_deadline(c, Deadline::kFrame, Clock::now() + options.frame_timeout);
        break;
      }
      Result<Frame> frame = wire::decode_body(std::string_view(c.in.data() + c.in_at + 4, len));
      consume(c, 4 + static_cast<size_t>(len));
      set_deadline(c, Deadline::kNone, {});
      if (!frame) return malformed(c, frame.status().message());
      answer(c, *frame);
      deliver_ready();
    }
  }

  void malformed(Conn& c, const std::string& why) {
    ++n_malformed;
    refusal("malformed", "dropped connection from {}: malformed frame: {}", c.peer, why);
    close(c);
  }

  void answer(Conn& c, const Frame& request) {
    std::optional<Frame> reply = store.handle(c.id, request);
    if (!reply) {
      c.parked = true;
      const auto timeout = KvStore::timeout_of(request);
      set_deadline(c, Deadline::kParked, Clock::now() + (timeout ? *timeout : std::chrono::milliseconds(0)));
      return;
    }
    if (reply->code == static_cast<uint8_t>(wire::Reply::kBadRequest)) {
      ++n_malformed;
      refusal("malformed", "dropped connection from {}: malformed request: {}", c.peer,
              reply->fields.empty() ? "" : reply->fields[0]);
      c.closing = true;
    } else if (reply->code == static_cast<uint8_t>(wire::Reply::kRefused)) {
      ++n_quota;
      refusal("over quota", "refused a request from {}: {}", c.peer, reply->fields.empty() ? "" : reply->fields[0]);
    }
    send(c, *reply);
  }

  // Replies to the parked requests a SET or ADD completed.
  void deliver_ready() {
    for (auto& [id, reply] : store.take_ready()) {
      auto it = conns.find(id);
      if (it == conns.end()) continue;
      Conn& w = it->second;
      w.parked = false;
      set_deadline(w, Deadline::kNone, {});
      if (send(w, reply)) runnable.push_back(id);
    }
  }

  bool send(Conn& c, const Frame& f) { return queue(c, wire::encode(f)); }

  // Appends to the connection's output and sends what the socket takes; false when the
  // connection was closed.
  bool queue(Conn& c, std::string bytes) {
    buffered += bytes.size();
    if (c.out_at == c.out.size()) {
      c.out = std::move(bytes);
      c.out_at = 0;
    } else {
      c.out += bytes;
    }
    return flush(c);
  }

  bool flush(Conn& c) {
    while (c.out_at < c.out.size()) {
      const ssize_t n = ::send(c.fd, c.out.data() + c.out_at, c.out.size() - c.out_at, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n <= 0) {
        close(c);
        return false;
      }
      c.out_at += static_cast<size_t>(n);
      buffered -= static_cast<size_t>(n);
    }
    const bool pending = c.out_at < c.out.size();
    if (!pending) {
      c.out.clear();
      c.out_at = 0;
      if (c.closing) {
        close(c);
        return false;
      }
    }
    if (pending != c.writing) {
      c.writing = pending;
      watch(c.fd, c.id, EPOLLIN | EPOLLRDHUP | (pending ? EPOLLOUT : 0u), EPOLL_CTL_MOD);
    }
    return true;
  }
};

RendezvousServer::RendezvousServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RendezvousServer::~RendezvousServer() { stop(); }

Result<std::unique_ptr<RendezvousServer>> RendezvousServer::start(std::string secret, RendezvousServerOptions options) {
  if (secret.empty()) return Status::invalid("the rendezvous server needs a job secret");
  auto impl = std::make_unique<Impl>(std::move(secret), std::move(options));
  if (Status s = impl->listen_on(); !s) {
    for (int fd : {impl->listen_fd, impl->epoll_fd, impl->wake_fd}) {
      if (fd >= 0) ::close(fd);
    }
    return s;
  }
  Impl* raw = impl.get();
  raw->thread = std::thread([raw] { raw->loop(); });
  log::info(kLog, "rendezvous store listening on {}:{}", raw->options.host, raw->port);
  return std::unique_ptr<RendezvousServer>(new RendezvousServer(std::move(impl)));
}

int RendezvousServer::port() const { return impl_->port; }

RendezvousServerStats RendezvousServer::stats() const {
  const Impl& i = *impl_;
  RendezvousServerStats s;
  s.open_connections = i.n_open.load();
  s.accepted = i.n_accepted.load();
  s.authenticated = i.n_authenticated.load();
  s.refused_wrong_secret = i.n_wrong_secret.load();
  s.dropped_handshake_timeout = i.n_handshake_timeout.load();
  s.dropped_malformed = i.n_malformed.load();
  s.dropped_over_capacity = i.n_over_capacity.load();
  s.refused_quota = i.n_quota.load();
  s.buffered_bytes = i.n_buffered.load();
  s.log_lines_suppressed = i.n_suppressed.load();
  return s;
}

void RendezvousServer::stop() {
  if (!impl_ || impl_->stopping.exchange(true)) return;
  const uint64_t one = 1;
  (void)!::write(impl_->wake_fd, &one, sizeof one);
  if (impl_->thread.joinable()) impl_->thread.join();
  for (int fd : {impl_->listen_fd, impl_->epoll_fd, impl_->wake_fd}) ::close(fd);
}

}  // namespace partrain::comm
