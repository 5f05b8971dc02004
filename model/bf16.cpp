#include "model/bf16.hpp"

#include <algorithm>

namespace merak::model {
namespace {

constexpr int64_t kChunk = 16384;

template <typename Body>
void chunked(int64_t n, Body&& body) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  if (chunks <= 1) {
    body(int64_t(0), n);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) body(c * kChunk, std::min(n, (c + 1) * kChunk));
}

}  // namespace

void convert(bf16* dst, const float* src, int64_t n) {
  chunked(n, [=](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) dst[i] = to_bf16(src[i]);
  });
}

void convert(float* dst, const bf16* src, int64_t n) {
  chunked(n, [=](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) dst[i] = to_f32(src[i]);
  });
}

void accumulate(bf16* dst, const float* src, int64_t n) {
  chunked(n, [=](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) dst[i] = to_bf16(to_f32(dst[i]) + src[i]);
  });
}

const char* bf16_support() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("amx-bf16")) return "AMX";
  if (__builtin_cpu_supports("avx512bf16")) return "AVX512-BF16";
  return "emulated";
}

}  // namespace merak::model
