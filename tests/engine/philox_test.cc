// Philox4x32-10 against the known-answer vectors published with Random123 (kat_vectors),
// and the properties partrain relies on: uniform range, normal moments, stream independence.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/philox.h"

namespace partrain::engine {
namespace {

TEST(Philox, MatchesRandom123KnownAnswers) {
  const Philox4 zero = philox4x32_10(Philox4{{0, 0, 0, 0}}, 0, 0);
  EXPECT_EQ(zero.x[0], 0x6627e8d5u);
  EXPECT_EQ(zero.x[1], 0xe169c58du);
  EXPECT_EQ(zero.x[2], 0xbc57ac4cu);
  EXPECT_EQ(zero.x[3], 0x9b00dbd8u);
  const Philox4 ones = philox4x32_10(Philox4{{~0u, ~0u, ~0u, ~0u}}, ~0u, ~0u);
  EXPECT_EQ(ones.x[0], 0x408f276du);
  EXPECT_EQ(ones.x[1], 0x41c83b0eu);
  EXPECT_EQ(ones.x[2], 0xa20bc7c6u);
  EXPECT_EQ(ones.x[3], 0x6d5451fdu);
  const Philox4 pi = philox4x32_10(Philox4{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
                                   0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(pi.x[0], 0xd16cfe09u);
  EXPECT_EQ(pi.x[1], 0x94fdccebu);
  EXPECT_EQ(pi.x[2], 0x5001e420u);
  EXPECT_EQ(pi.x[3], 0x24126ea1u);
}

TEST(Philox, UniformAndNormalHaveTheRightMoments) {
  const uint64_t key = philox_key(1337, 7, 3);
  const int n = 200000;
  double su = 0, sn = 0, sn2 = 0;
  float umin = 1, umax = 0;
  for (int i = 0; i < n; ++i) {
    const float u = philox_uniform(key, static_cast<uint64_t>(i));
    umin = std::fmin(umin, u);
    umax = std::fmax(umax, u);
    su += u;
    const float z = philox_normal(key, static_cast<uint64_t>(i));
    sn += z;
    sn2 += static_cast<double>(z) * z;
  }
  EXPECT_GE(umin, 0.0f);
  EXPECT_LT(umax, 1.0f);
  EXPECT_NEAR(su / n, 0.5, 0.005);
  EXPECT_NEAR(sn / n, 0.0, 0.01);
  EXPECT_NEAR(sn2 / n, 1.0, 0.02);
}

TEST(Philox, StreamsDependOnEveryKeyPart) {
  const uint64_t a = philox_key(1, 2, 3), b = philox_key(1, 2, 4), c = philox_key(1, 3, 3),
                 d = philox_key(2, 2, 3);
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
  EXPECT_EQ(a, philox_key(1, 2, 3));
  // Word i of a stream is the same whether produced alone or as part of a block.
  const Philox4 blk = philox_block(a, 5);
  for (int j = 0; j < 4; ++j) EXPECT_EQ(philox_u32(a, 20 + j), blk.x[j]);
}

}  // namespace
}  // namespace partrain::engine
