#include "comm/rendezvous/wire.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace partrain::comm::wire {
namespace {

void put_u32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

// Milliseconds poll(2) may wait before `deadline`; -1 for no deadline.
int poll_timeout(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > 60000 ? 60000 : static_cast<int>(left);
}

// Waits for `events` on fd; ok when ready, unavailable on timeout.
Status wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    struct pollfd p {fd, events, 0};
    int timeout = poll_timeout(deadline);
    int rc = ::poll(&p, 1, timeout);
    if (rc > 0) return Status::ok();  // readable, writable, hung up or errored: the I/O call says which
    if (rc < 0 && errno != EINTR) return Status::unavailable(fmt::format("poll failed: {}", std::strerror(errno)));
    if (rc == 0 && timeout == 0) return Status::unavailable(kTimedOut);
    if (rc == 0 && Clock::now() >= deadline) return Status::unavailable(kTimedOut);
  }
}

}  // namespace

std::string encode(const Frame& frame) {
  std::string body;
  body.push_back(static_cast<char>(frame.code));
  put_u32(&body, static_cast<uint32_t>(frame.fields.size()));
  for (const auto& f : frame.fields) {
    put_u32(&body, static_cast<uint32_t>(f.size()));
    body += f;
  }
  std::string out;
  out.reserve(4 + body.size());
  put_u32(&out, static_cast<uint32_t>(body.size()));
  out += body;
  return out;
}

Result<Frame> decode_body(std::string_view body) {
  if (body.size() < 5) return Status::invalid(fmt::format("frame of {} bytes is shorter than its header", body.size()));
  Frame frame;
  frame.code = static_cast<uint8_t>(body[0]);
  uint32_t count = get_u32(body.data() + 1);
  size_t pos = 5;
  // Every field needs at least its 4-byte length, so count is bounded by what is left.
  if (count > kMaxFields || count > (body.size() - pos) / 4) {
    return Status::invalid(fmt::format("frame claims {} fields but holds {} bytes", count, body.size()));
  }
  frame.fields.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    if (body.size() - pos < 4) return Status::invalid(fmt::format("field {} length is cut off", i));
    uint32_t len = get_u32(body.data() + pos);
    pos += 4;
    if (len > body.size() - pos) {
      return Status::invalid(fmt::format("field {} claims {} bytes but {} are left", i, len, body.size() - pos));
    }
    frame.fields.emplace_back(body.substr(pos, len));
    pos += len;
  }
  if (pos != body.size()) return Status::invalid(fmt::format("{} stray bytes after the last field", body.size() - pos));
  return frame;
}

std::string encode_i64(int64_t v) {
  std::string out(8, '\0');
  auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((u >> (8 * i)) & 0xff);
  return out;
}

Result<int64_t> decode_i64(std::string_view bytes) {
  if (bytes.size() != 8) return Status::invalid(fmt::format("integer field has {} bytes, not 8", bytes.size()));
  uint64_t u = 0;
  for (int i = 0; i < 8; ++i) u |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  return static_cast<int64_t>(u);
}

Status read_exact(int fd, void* buf, size_t n, Clock::time_point deadline) {
  auto* p = static_cast<char*>(buf);
  size_t got = 0;
  while (got < n) {
    PARTRAIN_RETURN_IF_ERROR(wait_ready(fd, POLLIN, deadline));
    ssize_t rc = ::recv(fd, p + got, n - got, MSG_DONTWAIT);
    if (rc > 0) {
      got += static_cast<size_t>(rc);
    } else if (rc == 0) {
      return Status::unavailable("connection closed by peer");
    } else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
      return Status::unavailable(fmt::format("read failed: {}", std::strerror(errno)));
    }
  }
  return Status::ok();
}

Status write_all(int fd, const void* buf, size_t n, Clock::time_point deadline) {
  const auto* p = static_cast<const char*>(buf);
  size_t sent = 0;
  while (sent < n) {
    PARTRAIN_RETURN_IF_ERROR(wait_ready(fd, POLLOUT, deadline));
    ssize_t rc = ::send(fd, p + sent, n - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (rc > 0) {
      sent += static_cast<size_t>(rc);
    } else if (rc < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
      return Status::unavailable(fmt::format("write failed: {}", std::strerror(errno)));
    }
  }
  return Status::ok();
}

Result<Frame> read_frame(int fd, Clock::time_point first_byte_deadline, std::chrono::milliseconds body_time) {
  char header[4];
  PARTRAIN_RETURN_IF_ERROR(read_exact(fd, header, 1, first_byte_deadline));
  auto deadline = Clock::now() + body_time;
  PARTRAIN_RETURN_IF_ERROR(read_exact(fd, header + 1, 3, deadline));
  uint32_t len = get_u32(header);
  if (len > kMaxFrameBytes) {
    return Status::invalid(fmt::format("frame of {} bytes exceeds the {} byte limit", len, kMaxFrameBytes));
  }
  std::string body(len, '\0');
  PARTRAIN_RETURN_IF_ERROR(read_exact(fd, body.data(), len, deadline));
  return decode_body(body);
}

std::string peer_name(int fd) {
  struct sockaddr_storage ss {};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<struct sockaddr*>(&ss), &len) != 0) return "unknown peer";
  char host[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    const auto* sin = reinterpret_cast<const struct sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &sin->sin_addr, host, sizeof(host));
    return fmt::format("{}:{}", host, ntohs(sin->sin_port));
  }
  if (ss.ss_family == AF_INET6) {
    const auto* sin6 = reinterpret_cast<const struct sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof(host));
    return fmt::format("[{}]:{}", host, ntohs(sin6->sin6_port));
  }
  return "unknown peer";
}

}  // namespace partrain::comm::wire
