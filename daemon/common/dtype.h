// The element types that tensors and collectives name (header only, standard library): the
// engine's tensors (engine/backend.h), the communicators' typed buffers (comm/communicator.h)
// and the plugin ABI's (include/partrain/abi.h, PARTRAIN_DTYPE_*) all mean these three.
//
// bf16 is the upper half of an IEEE float32: from_bf16 is exact, to_bf16 rounds to nearest
// even (NaN stays a quiet NaN). Example: to_bf16(1.00390625f) = 0x3f80 (1.0: the tie goes
// to the even mantissa), to_bf16(1.01171875f) = 0x3f82.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace partrain {

enum class DType : uint8_t { kF32, kBF16, kI32 };

inline size_t dtype_size(DType t) { return t == DType::kBF16 ? 2 : 4; }
inline const char* dtype_name(DType t) { return t == DType::kF32 ? "f32" : t == DType::kBF16 ? "bf16" : "i32"; }

inline uint16_t to_bf16(float x) {
  uint32_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float x = 0;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

}  // namespace partrain
