#pragma once
// bfloat16: the upper half of an IEEE float (8 exponent bits, 7 mantissa
// bits), the storage type of activations in mixed-precision runs.
//
// Conversion from float rounds to nearest, ties to even, and keeps NaN a NaN
// (quieted); it is the same on every CPU (plain integer arithmetic, which the
// compiler vectorises), so a bf16 run is reproducible across machines. All
// arithmetic on bf16 data happens in float: load() widens, store() rounds.

#include <cstdint>
#include <cstring>

namespace merak::model {

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

// Element access that lets one kernel body serve float and bf16 storage.
inline float load(float x) {
  return x;
}
inline float load(bf16 x) {
  return to_f32(x);
}
inline void store(float& dst, float v) {
  dst = v;
}
inline void store(bf16& dst, float v) {
  dst = to_bf16(v);
}

// Bulk conversions over n elements, spread over the OpenMP threads.
void convert(bf16* dst, const float* src, int64_t n);
void convert(float* dst, const bf16* src, int64_t n);
// dst[i] = bf16(dst[i] + src[i]): accumulating a float result into bf16.
void accumulate(bf16* dst, const float* src, int64_t n);

// What runs bf16 GEMMs on this CPU: "AMX", "AVX512-BF16", or "emulated"
// (float arithmetic on widened inputs; correct, without bf16 speed).
const char* bf16_support();

}  // namespace merak::model
