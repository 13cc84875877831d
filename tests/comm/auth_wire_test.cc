// HMAC-SHA256 against RFC 4231's published vectors, the handshake proofs, and the frame
// codec's rejection of malformed input.
#include <string>

#include <gtest/gtest.h>

#include "comm/rendezvous/auth.h"
#include "comm/rendezvous/wire.h"

namespace partrain::comm {
namespace {

std::string hex(const auth::Mac& mac) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (uint8_t b : mac) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

TEST(Hmac, Rfc4231TestCase2) {
  EXPECT_EQ(hex(auth::hmac_sha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(Hmac, Rfc4231TestCase1) {
  std::string key(20, '\x0b');
  EXPECT_EQ(hex(auth::hmac_sha256(key, "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
}

TEST(Handshake, ProofsDependOnSecretNoncesAndDirection) {
  auto ns = auth::random_nonce();
  auto nc = auth::random_nonce();
  ASSERT_TRUE(ns.is_ok() && nc.is_ok());
  EXPECT_NE(*ns, *nc);
  auto a = auth::client_proof("secret-one-0123456", *ns, *nc);
  EXPECT_TRUE(auth::mac_equal(a, auth::client_proof("secret-one-0123456", *ns, *nc)));
  EXPECT_FALSE(auth::mac_equal(a, auth::client_proof("secret-two-0123456", *ns, *nc)));
  EXPECT_FALSE(auth::mac_equal(a, auth::client_proof("secret-one-0123456", *nc, *ns)));
  // A client proof is never a valid server proof (no reflection).
  EXPECT_FALSE(auth::mac_equal(a, auth::server_proof("secret-one-0123456", *ns, *nc)));
}

TEST(Handshake, MessagesRoundTripAndBadMagicIsRejected) {
  auto n = *auth::random_nonce();
  auto hello = auth::encode_hello(n);
  auto back = auth::decode_hello(hello.data());
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(*back, n);
  hello[0] = 'X';
  EXPECT_FALSE(auth::decode_hello(hello.data()).is_ok());
  auto mac = auth::client_proof("k-0123456789abcdef", n, n);
  auto proof = auth::encode_proof(n, mac);
  auth::Nonce n2{};
  auth::Mac m2{};
  ASSERT_TRUE(auth::decode_proof(proof.data(), &n2, &m2).is_ok());
  EXPECT_EQ(n2, n);
  EXPECT_TRUE(auth::mac_equal(m2, mac));
  proof[4] = 99;  // unknown version
  EXPECT_FALSE(auth::decode_proof(proof.data(), &n2, &m2).is_ok());
}

TEST(Frames, RoundTrip) {
  wire::Frame f{3, {"key", std::string("\0\1\2", 3), ""}};
  std::string bytes = wire::encode(f);
  ASSERT_EQ(bytes.size(), 4u + 1 + 4 + (4 + 3) + (4 + 3) + 4);
  auto back = wire::decode_body(std::string_view(bytes).substr(4));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->code, 3);
  EXPECT_EQ(back->fields, f.fields);
  EXPECT_EQ(*wire::decode_i64(wire::encode_i64(-1234567890123)), -1234567890123);
}

TEST(Frames, MalformedBodiesAreRejected) {
  std::string good = wire::encode(wire::Frame{1, {"abc", "de"}}).substr(4);
  // Every truncation is rejected, none crashes.
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(wire::decode_body(std::string_view(good).substr(0, n)).is_ok()) << n;
  }
  EXPECT_FALSE(wire::decode_body(good + "x").is_ok());  // stray byte
  // A field count far beyond the bytes present.
  std::string huge_count = good;
  huge_count[1] = huge_count[2] = huge_count[3] = huge_count[4] = '\xff';
  EXPECT_FALSE(wire::decode_body(huge_count).is_ok());
  // A field length far beyond the bytes present.
  std::string huge_len = good;
  huge_len[5] = huge_len[6] = huge_len[7] = huge_len[8] = '\xff';
  EXPECT_FALSE(wire::decode_body(huge_len).is_ok());
  EXPECT_FALSE(wire::decode_i64("1234567").is_ok());
}

}  // namespace
}  // namespace partrain::comm
