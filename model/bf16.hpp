#pragma once
// bf16 in the model (the type and its conversions: core/bf16.hpp). All
// arithmetic on bf16 data happens in float: load() widens, store() rounds.

#include <cstdint>

#include "core/bf16.hpp"

namespace merak::model {

using merak::bf16;
using merak::to_bf16;
using merak::to_f32;

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
