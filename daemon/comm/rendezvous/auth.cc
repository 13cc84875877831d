#include "comm/rendezvous/auth.h"

#include <cstring>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

namespace partrain::comm::auth {
namespace {

constexpr char kHelloMagic[4] = {'P', 'T', 'R', 'S'};
constexpr char kProofMagic[4] = {'P', 'T', 'R', 'C'};

Mac proof(std::string_view secret, std::string_view label, const Nonce& first, const Nonce& second) {
  std::string data(label);
  data.push_back('\0');
  data.append(reinterpret_cast<const char*>(first.data()), first.size());
  data.append(reinterpret_cast<const char*>(second.data()), second.size());
  return hmac_sha256(secret, data);
}

}  // namespace

Mac hmac_sha256(std::string_view key, std::string_view data) {
  Mac out{};
  unsigned int len = 0;
  // The one-shot HMAC() cannot fail for SHA-256 with in-memory inputs short of OOM;
  // on failure `out` stays zero and every comparison against it fails closed.
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data(), &len);
  if (len != out.size()) out.fill(0);
  return out;
}

bool mac_equal(const Mac& a, const Mac& b) { return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0; }

Result<Nonce> random_nonce() {
  Nonce n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) {
    return Status::internal("the OpenSSL random generator failed to produce a nonce");
  }
  return n;
}

Mac client_proof(std::string_view secret, const Nonce& server_nonce, const Nonce& client_nonce) {
  return proof(secret, "partrain-rendezvous-client", server_nonce, client_nonce);
}

Mac server_proof(std::string_view secret, const Nonce& server_nonce, const Nonce& client_nonce) {
  return proof(secret, "partrain-rendezvous-server", client_nonce, server_nonce);
}

std::array<uint8_t, kHelloBytes> encode_hello(const Nonce& server_nonce) {
  std::array<uint8_t, kHelloBytes> out{};
  std::memcpy(out.data(), kHelloMagic, 4);
  out[4] = kVersion;
  std::memcpy(out.data() + 5, server_nonce.data(), kNonceBytes);
  return out;
}

Result<Nonce> decode_hello(const uint8_t* data) {
  if (std::memcmp(data, kHelloMagic, 4) != 0) {
    return Status::invalid("the peer is not a partrain rendezvous server (bad greeting)");
  }
  if (data[4] != kVersion) {
    return Status::invalid("the rendezvous server speaks protocol version " + std::to_string(data[4]) +
                           ", this build speaks " + std::to_string(kVersion) +
                           "; run the same partrain version on every node");
  }
  Nonce n{};
  std::memcpy(n.data(), data + 5, kNonceBytes);
  return n;
}

std::array<uint8_t, kProofBytes> encode_proof(const Nonce& client_nonce, const Mac& mac) {
  std::array<uint8_t, kProofBytes> out{};
  std::memcpy(out.data(), kProofMagic, 4);
  out[4] = kVersion;
  std::memcpy(out.data() + 5, client_nonce.data(), kNonceBytes);
  std::memcpy(out.data() + 5 + kNonceBytes, mac.data(), kMacBytes);
  return out;
}

Status decode_proof(const uint8_t* data, Nonce* client_nonce, Mac* mac) {
  if (std::memcmp(data, kProofMagic, 4) != 0) return Status::invalid("bad handshake magic");
  if (data[4] != kVersion) return Status::invalid("unsupported protocol version " + std::to_string(data[4]));
  std::memcpy(client_nonce->data(), data + 5, kNonceBytes);
  std::memcpy(mac->data(), data + 5 + kNonceBytes, kMacBytes);
  return Status::ok();
}

}  // namespace partrain::comm::auth
