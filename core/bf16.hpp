#pragma once
// bfloat16: the upper half of an IEEE float (8 exponent bits, 7 mantissa
// bits), the storage type of activations in mixed-precision runs and of
// their tensor-parallel sums on the wire.
//
// Conversion from float rounds to nearest, ties to even, and keeps NaN a NaN
// (quieted); it is plain integer arithmetic (the compiler vectorises it), so
// it gives the same bits on every CPU.

#include <cstdint>
#include <cstring>

namespace merak {

struct bf16 {
  uint16_t bits;
};
static_assert(sizeof(bf16) == 2);

inline float to_f32(bf16 x) {
  uint32_t u = uint32_t(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline bf16 to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t nan = (u >> 16) | 0x40u;
  return {uint16_t((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded)};
}

}  // namespace merak
