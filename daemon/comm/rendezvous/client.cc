#include "comm/rendezvous/client.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "comm/rendezvous/auth.h"
#include "comm/rendezvous/wire.h"

namespace partrain::comm {
namespace {

using wire::Clock;

// One TCP connect attempt to any address of host:port, finishing by `deadline`.
Result<int> connect_once(const std::string& host, int port, Clock::time_point deadline) {
  struct addrinfo hints {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    return Status::invalid(fmt::format("rendezvous host '{}' cannot be resolved: {}", host, gai_strerror(rc)));
  }
  std::string last_error = "no address";
  int result = -1;
  for (auto* ai = res; ai != nullptr && result < 0; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last_error = std::strerror(errno);
      ::close(fd);
      continue;
    }
    struct pollfd p {fd, POLLOUT, 0};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    int err = ETIMEDOUT;
    if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 1))) > 0) {
      socklen_t len = sizeof(err);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err != 0) {
      last_error = std::strerror(err);
      ::close(fd);
      continue;
    }
    result = fd;
  }
  ::freeaddrinfo(res);
  if (result < 0) return Status::unavailable(last_error);
  int one = 1;
  ::setsockopt(result, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return result;
}

// The client half of auth.h's handshake on a connected socket.
Status handshake(int fd, const std::string& secret, const std::string& address, Clock::time_point deadline) {
  uint8_t hello[auth::kHelloBytes];
  if (Status s = wire::read_exact(fd, hello, sizeof(hello), deadline); !s) {
    return Status::unavailable(fmt::format("rendezvous server {} sent no greeting: {}", address, s.message()));
  }
  auto server_nonce = auth::decode_hello(hello);
  if (!server_nonce) return server_nonce.status().prefixed(fmt::format("rendezvous server {}: ", address));
  auto client_nonce = auth::random_nonce();
  if (!client_nonce) return client_nonce.status();
  auto proof = auth::encode_proof(*client_nonce, auth::client_proof(secret, *server_nonce, *client_nonce));
  PARTRAIN_RETURN_IF_ERROR(wire::write_all(fd, proof.data(), proof.size(), deadline));
  uint8_t verdict[auth::kVerdictBytes];
  Status got = wire::read_exact(fd, verdict, 1, deadline);
  if (got && verdict[0] == 1) got = wire::read_exact(fd, verdict + 1, auth::kMacBytes, deadline);
  if (!got) {
    return Status::unavailable(fmt::format("rendezvous server {} broke off the handshake: {}", address, got.message()));
  }
  if (verdict[0] != 1) {
    return Status::invalid(fmt::format(
        "the rendezvous server {} refused this process's job secret; every process of the job must "
        "use the same secret (PARTRAIN_JOB_SECRET or the job's secret file)",
        address));
  }
  auth::Mac server_mac{};
  std::memcpy(server_mac.data(), verdict + 1, auth::kMacBytes);
  if (!auth::mac_equal(server_mac, auth::server_proof(secret, *server_nonce, *client_nonce))) {
    return Status::invalid(fmt::format(
        "the rendezvous server {} could not prove it knows the job secret: it is not this job's "
        "coordinator (a stale address or a reused port?)",
        address));
  }
  return Status::ok();
}

}  // namespace

struct RendezvousClient::Reply {
  wire::Reply code;
  std::vector<std::string> fields;
};

RendezvousClient::RendezvousClient(int fd, std::string host, int port, std::string secret, RendezvousClientOptions options)
    : fd_(fd), host_(std::move(host)), port_(port), secret_(std::move(secret)), options_(options),
      address_(fmt::format("{}:{}", host_, port_)) {}

RendezvousClient::~RendezvousClient() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::unique_ptr<RendezvousClient>> RendezvousClient::connect(std::string host, int port, std::string secret,
                                                          RendezvousClientOptions options) {
  std::string address = fmt::format("{}:{}", host, port);
  auto deadline = Clock::now() + options.connect_timeout;
  std::string last_error;
  // The coordinator may start its server after the workers: retry refused connects.
  for (;;) {
    auto fd = connect_once(host, port, deadline);
    if (fd) {
      Status s = handshake(*fd, secret, address, Clock::now() + options.io_timeout);
      if (s) {
        return std::unique_ptr<RendezvousClient>(new RendezvousClient(*fd, std::move(host), port, std::move(secret), options));
      }
      ::close(*fd);
      if (s.code() == StatusCode::kInvalidArgument) return s;
      last_error = s.message();
    } else {
      if (fd.status().code() == StatusCode::kInvalidArgument) return fd.status();
      last_error = fd.status().message();
    }
    if (Clock::now() + std::chrono::milliseconds(50) >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Status::unavailable(fmt::format(
      "cannot reach the rendezvous server {} within {} ms ({}); check that the coordinator is running "
      "and the address is right",
      address, options.connect_timeout.count(), last_error));
}

Result<std::unique_ptr<RendezvousClient>> RendezvousClient::clone() const {
  return connect(host_, port_, secret_, options_);
}

Result<RendezvousClient::Reply> RendezvousClient::call(uint8_t op, std::vector<std::string> fields,
                                             std::chrono::milliseconds wait) {
  std::lock_guard lock(mu_);
  if (fd_ < 0) return Status::unavailable(fmt::format("connection to rendezvous server {} was lost", address_));
  auto deadline = Clock::now() + wait + options_.io_timeout;
  std::string bytes = wire::encode(wire::Frame{op, std::move(fields)});
  if (bytes.size() - 4 > wire::kMaxFrameBytes) {
    return Status::invalid(fmt::format("rendezvous request of {} bytes exceeds the {} byte limit",
                                       bytes.size(), wire::kMaxFrameBytes));
  }
  Status s = wire::write_all(fd_, bytes.data(), bytes.size(), deadline);
  Result<wire::Frame> answer = s ? wire::read_frame(fd_, deadline, options_.io_timeout) : Result<wire::Frame>(s);
  if (!answer) {
    // A half-finished exchange leaves the stream out of step: drop the connection.
    ::close(fd_);
    fd_ = -1;
    return Status::unavailable(
        fmt::format("rendezvous server {} stopped answering: {}", address_, answer.status().message()));
  }
  auto code = static_cast<wire::Reply>(answer->code);
  if (code == wire::Reply::kBadRequest) {
    return Status::internal(fmt::format("rendezvous server {} rejected a request: {}", address_,
                                        answer->fields.empty() ? "" : answer->fields[0]));
  }
  return Reply{code, std::move(answer->fields)};
}

Status RendezvousClient::set(std::string_view key, std::string_view value) {
  auto r = call(static_cast<uint8_t>(wire::Op::kSet), {std::string(key), std::string(value)}, {});
  return r ? Status::ok() : r.status();
}

Result<std::string> RendezvousClient::get(std::string_view key, std::chrono::milliseconds timeout) {
  auto r = call(static_cast<uint8_t>(wire::Op::kGet), {std::string(key), wire::encode_i64(timeout.count())}, timeout);
  if (!r) return r.status();
  if (r->code == wire::Reply::kTimeout) {
    return Status::unavailable(fmt::format("rendezvous key '{}' did not appear at {} within {} ms", key, address_,
                                           timeout.count()));
  }
  if (r->fields.size() != 1) return Status::internal("rendezvous GET reply has no value");
  return std::move(r->fields[0]);
}

Result<int64_t> RendezvousClient::add(std::string_view key, int64_t delta) {
  auto r = call(static_cast<uint8_t>(wire::Op::kAdd), {std::string(key), wire::encode_i64(delta)}, {});
  if (!r) return r.status();
  if (r->fields.size() != 1) return Status::internal("rendezvous ADD reply has no value");
  return wire::decode_i64(r->fields[0]);
}

Result<bool> RendezvousClient::remove(std::string_view key) {
  auto r = call(static_cast<uint8_t>(wire::Op::kDelete), {std::string(key)}, {});
  if (!r) return r.status();
  if (r->fields.size() != 1) return Status::internal("rendezvous DELETE reply has no value");
  auto v = wire::decode_i64(r->fields[0]);
  if (!v) return v.status();
  return *v != 0;
}

Status RendezvousClient::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> fields;
  fields.reserve(keys.size() + 1);
  fields.push_back(wire::encode_i64(timeout.count()));
  fields.insert(fields.end(), keys.begin(), keys.end());
  auto r = call(static_cast<uint8_t>(wire::Op::kWait), std::move(fields), timeout);
  if (!r) return r.status();
  if (r->code == wire::Reply::kTimeout) {
    std::string missing;
    if (auto there = check(keys); there) {
      for (const auto& k : keys) {
        auto one = check({k});
        if (one && !*one) missing += (missing.empty() ? "" : ", ") + k;
        if (missing.size() > 200) break;
      }
    }
    return Status::unavailable(fmt::format("rendezvous keys not all present at {} after {} ms (missing: {})",
                                           address_, timeout.count(), missing.empty() ? "?" : missing));
  }
  return Status::ok();
}

Result<bool> RendezvousClient::check(const std::vector<std::string>& keys) {
  auto r = call(static_cast<uint8_t>(wire::Op::kCheck), keys, {});
  if (!r) return r.status();
  if (r->fields.size() != 1) return Status::internal("rendezvous CHECK reply has no value");
  auto v = wire::decode_i64(r->fields[0]);
  if (!v) return v.status();
  return *v != 0;
}

Status RendezvousClient::barrier(std::string_view name, int rank, int world, std::chrono::milliseconds timeout) {
  if (world <= 0 || rank < 0 || rank >= world) {
    return Status::invalid(fmt::format("barrier '{}': rank {} is outside world {}", name, rank, world));
  }
  PARTRAIN_RETURN_IF_ERROR(set(fmt::format("{}/{}", name, rank), "1"));
  std::vector<std::string> keys;
  keys.reserve(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) keys.push_back(fmt::format("{}/{}", name, r));
  return wait(keys, timeout).prefixed(fmt::format("barrier '{}': ", name));
}

Result<std::string> RendezvousClient::share(std::string_view key, bool is_root, std::string_view root_value,
                                       std::chrono::milliseconds timeout) {
  if (is_root) {
    PARTRAIN_RETURN_IF_ERROR(set(key, root_value));
    return std::string(root_value);
  }
  return get(key, timeout);
}

}  // namespace partrain::comm
