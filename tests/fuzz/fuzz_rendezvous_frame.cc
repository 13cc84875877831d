// The rendezvous store's wire format after the handshake (comm/rendezvous/wire.h), as
// functions: the body decoder on any bytes (a decoded frame re-encodes to the same bytes),
// the i64 field decoder, and read_frame over a socket pair holding the input as a peer
// would send it (length prefix, short and over-long frames, a peer that stops).
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "comm/rendezvous/wire.h"

namespace wire = partrain::comm::wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  partrain::Result<wire::Frame> f = wire::decode_body(bytes);
  if (f) {
    const std::string again = wire::encode(*f);
    if (std::string_view(again).substr(4) != bytes.substr(0, again.size() - 4)) std::abort();
    for (const std::string& field : f->fields) (void)wire::decode_i64(field);
  }
  // The same bytes from a peer: at most what one socket buffer holds, so the write never blocks.
  if (size <= 32768) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 0;
    const int buf = 1 << 20;
    (void)::setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::write(sv[0], data + done, size - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::shutdown(sv[0], SHUT_WR);  // then the peer is gone
    const auto now = wire::Clock::now();
    for (int i = 0; i < 4; ++i) {
      partrain::Result<wire::Frame> r =
          wire::read_frame(sv[1], now + std::chrono::milliseconds(5), std::chrono::milliseconds(5));
      if (!r) break;
    }
    ::close(sv[0]);
    ::close(sv[1]);
  }
  return 0;
}
