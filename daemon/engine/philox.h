// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11):
// a counter-based random generator. A random word is a pure function of (key, counter),
// so any element of any random stream can be produced on any device, in any order, by
// any rank. partrain keys every stream by (seed, step, layer, logical position): parameter
// init and dropout masks are then the same whatever the model's split or the run's
// restarts. Header-only, usable from host code and from CUDA kernels.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define PARTRAIN_HD __host__ __device__ __forceinline__
#else
#define PARTRAIN_HD inline
#endif

namespace partrain::engine {

struct Philox4 {
  uint32_t x[4];
};

// The Philox4x32 round function, 10 rounds, constants from the paper (and Random123).
PARTRAIN_HD Philox4 philox4x32_10(Philox4 ctr, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr.x[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr.x[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    ctr = Philox4{{hi1 ^ ctr.x[1] ^ k0, lo1, hi0 ^ ctr.x[3] ^ k1, lo0}};
    k0 += kW0;
    k1 += kW1;
  }
  return ctr;
}

// Derives a 64-bit stream key from a seed and up to three stream ids, e.g.
// philox_key(seed, step, layer * 4 + site). Distinct ids give unrelated streams.
PARTRAIN_HD uint64_t philox_key(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
  const Philox4 r = philox4x32_10(
      Philox4{{static_cast<uint32_t>(a), static_cast<uint32_t>(a >> 32) ^ static_cast<uint32_t>(c),
               static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32) ^ 0x7061u /* "pa" */}},
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return (static_cast<uint64_t>(r.x[1]) << 32) | r.x[0];
}

// The four words of block `block` of stream `key`.
PARTRAIN_HD Philox4 philox_block(uint64_t key, uint64_t block) {
  return philox4x32_10(Philox4{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u}},
                       static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32));
}

// Word i of stream `key` (word i is word i % 4 of block i / 4).
PARTRAIN_HD uint32_t philox_u32(uint64_t key, uint64_t i) {
  return philox_block(key, i >> 2).x[i & 3];
}

// A 32-bit word to a float uniform in [0, 1) with 24 random bits (exact in fp32).
PARTRAIN_HD float philox_to_unit(uint32_t word) {
  return static_cast<float>(word >> 8) * (1.0f / 16777216.0f);
}

// Uniform [0, 1) number i of stream `key`: what dropout compares against p.
PARTRAIN_HD float philox_uniform(uint64_t key, uint64_t i) {
  return philox_to_unit(philox_u32(key, i));
}

// Standard normal number i of stream `key` (Box-Muller on words 0 and 1 of block i, in
// double so host and device agree to the last bit after rounding to float).
PARTRAIN_HD float philox_normal(uint64_t key, uint64_t i) {
  const Philox4 r = philox_block(key, i);
  const double u1 = (static_cast<double>(r.x[0]) + 1.0) * (1.0 / 4294967296.0);  // (0, 1]
  const double u2 = static_cast<double>(r.x[1]) * (1.0 / 4294967296.0);          // [0, 1)
  return static_cast<float>(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

// FNV-1a over a name: turns a parameter's name into a stream id (host only).
inline uint64_t philox_name_id(const char* name) {
  uint64_t h = 1469598103934665603ull;
  for (; *name; ++name) h = (h ^ static_cast<unsigned char>(*name)) * 1099511628211ull;
  return h;
}

}  // namespace partrain::engine
