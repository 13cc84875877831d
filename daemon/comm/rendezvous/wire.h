// The rendezvous store's wire format after the handshake, and socket I/O with deadlines.
//
//   frame    = u32 length (little endian, of what follows, <= kMaxFrameBytes) | body
//   body     = u8 code | u32 field count | count x (u32 length | bytes)
//
// A request's code is an Op, a reply's code is a Reply. Every length is checked against
// what is left of the frame before anything is allocated, so a malformed or hostile frame
// is rejected with a reason and never crashes or balloons the server.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace partrain::comm::wire {

inline constexpr size_t kMaxFrameBytes = size_t{16} << 20;
inline constexpr size_t kMaxKeyBytes = 4096;
inline constexpr size_t kMaxFields = 65536;

enum class Op : uint8_t {
  kSet = 1,     // key, value                  -> ok
  kGet = 2,     // key, timeout_ms             -> ok value | timeout
  kAdd = 3,     // key, delta (i64)            -> ok new value (i64)
  kDelete = 4,  // key                         -> ok existed (i64 0/1)
  kWait = 5,    // timeout_ms, key...          -> ok | timeout
  kCheck = 6,   // key...                      -> ok all-exist (i64 0/1)
};

enum class Reply : uint8_t { kOk = 0, kTimeout = 1, kBadRequest = 2 };

struct Frame {
  uint8_t code = 0;
  std::vector<std::string> fields;
};

// Length prefix included.
std::string encode(const Frame& frame);
// `body` is the frame without its length prefix.
Result<Frame> decode_body(std::string_view body);

std::string encode_i64(int64_t v);
Result<int64_t> decode_i64(std::string_view bytes);

using Clock = std::chrono::steady_clock;

// The unavailable Status of an I/O call whose deadline passed carries this message.
inline constexpr const char* kTimedOut = "timed out";
inline bool is_timeout(const Status& s) {
  return s.code() == StatusCode::kUnavailable && s.message() == kTimedOut;
}

// Blocking I/O that gives up at `deadline` (Clock::time_point::max() waits forever).
// unavailable when the peer closed or reset the connection or the deadline passed.
Status read_exact(int fd, void* buf, size_t n, Clock::time_point deadline);
Status write_all(int fd, const void* buf, size_t n, Clock::time_point deadline);

// Waits until `first_byte_deadline` for a frame to begin, then allows `body_time` for
// the rest of it. invalid for a malformed frame, unavailable for a closed connection.
Result<Frame> read_frame(int fd, Clock::time_point first_byte_deadline,
                         std::chrono::milliseconds body_time);

// "1.2.3.4:5678" for a connected socket's peer; "unknown peer" when it cannot be had.
std::string peer_name(int fd);

}  // namespace partrain::comm::wire
