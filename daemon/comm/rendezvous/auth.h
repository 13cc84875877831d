// Mutual challenge-response over the per-job secret. Neither side ever sends the secret:
//
//   server -> client   hello:  "PTRS" v1 | server nonce (32 random bytes)
//   client -> server   proof:  "PTRC" v1 | client nonce | HMAC(secret, "client" | ns | nc)
//   server -> client   verdict: 1 | HMAC(secret, "server" | nc | ns)    (accepted)
//                               0                                       (refused; then close)
//
// The client checks the server's HMAC too, so a process that grabbed a reused port cannot
// pose as the coordinator. Fresh nonces on both sides stop replays; the two labels keep a
// proof for one direction from being reflected as the other.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace partrain::comm::auth {

inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;
inline constexpr uint8_t kVersion = 1;
inline constexpr size_t kHelloBytes = 4 + 1 + kNonceBytes;
inline constexpr size_t kProofBytes = 4 + 1 + kNonceBytes + kMacBytes;
inline constexpr size_t kVerdictBytes = 1 + kMacBytes;

using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;

// HMAC-SHA256 (RFC 2104) via OpenSSL's libcrypto.
Mac hmac_sha256(std::string_view key, std::string_view data);
// Constant-time comparison (CRYPTO_memcmp), so timing reveals nothing about the MAC.
bool mac_equal(const Mac& a, const Mac& b);
// Fresh random nonce from the OS CSPRNG; internal error when it fails.
Result<Nonce> random_nonce();

Mac client_proof(std::string_view secret, const Nonce& server_nonce, const Nonce& client_nonce);
Mac server_proof(std::string_view secret, const Nonce& server_nonce, const Nonce& client_nonce);

// Byte layouts of the three handshake messages.
std::array<uint8_t, kHelloBytes> encode_hello(const Nonce& server_nonce);
Result<Nonce> decode_hello(const uint8_t* data);  // kHelloBytes bytes
std::array<uint8_t, kProofBytes> encode_proof(const Nonce& client_nonce, const Mac& mac);
// invalid when the magic or version is wrong.
Status decode_proof(const uint8_t* data, Nonce* client_nonce, Mac* mac);  // kProofBytes bytes

}  // namespace partrain::comm::auth
