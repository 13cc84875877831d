// The rendezvous handshake before authentication (comm/rendezvous/auth.h), as functions:
// what a client sends the server (the proof) and what the server sends a client (hello,
// verdict) parsed from any bytes, and the server's check of the proof, which no input may
// pass without the secret.
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "comm/rendezvous/auth.h"

namespace auth = partrain::comm::auth;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr std::string_view kSecret = "fuzz-secret-0123456789abcdef0123456789abcdef";
  std::array<uint8_t, auth::kProofBytes> proof{};
  std::memcpy(proof.data(), data, size < proof.size() ? size : proof.size());
  auth::Nonce server_nonce{}, client_nonce{};
  for (size_t i = 0; i < server_nonce.size(); ++i) server_nonce[i] = static_cast<uint8_t>(i * 7 + 1);
  auth::Mac mac{};
  if (auth::decode_proof(proof.data(), &client_nonce, &mac)) {
    // The server's verdict: only the secret makes this MAC, and the fuzzer does not have it.
    if (auth::mac_equal(auth::client_proof(kSecret, server_nonce, client_nonce), mac)) std::abort();
  }
  std::array<uint8_t, auth::kHelloBytes> hello{};
  std::memcpy(hello.data(), data, size < hello.size() ? size : hello.size());
  partrain::Result<auth::Nonce> n = auth::decode_hello(hello.data());
  if (n) {
    // A client answering that hello, and checking a verdict made of the rest of the input.
    const auth::Mac mine = auth::client_proof(kSecret, *n, client_nonce);
    (void)auth::encode_proof(client_nonce, mine);
    auth::Mac verdict{};
    if (size > hello.size()) {
      const size_t rest = size - hello.size();
      std::memcpy(verdict.data(), data + hello.size(), rest < verdict.size() ? rest : verdict.size());
    }
    if (auth::mac_equal(auth::server_proof(kSecret, *n, client_nonce), verdict)) std::abort();
  }
  return 0;
}
