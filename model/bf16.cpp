#include "model/bf16.hpp"

#if defined(__clang__)
#include <cpuid.h>
#endif

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
#if defined(__clang__)
  // clang's __builtin_cpu_supports knows neither feature: CPUID leaf 7
  // (AMX-BF16: sub-leaf 0, EDX bit 22; AVX512-BF16: sub-leaf 1, EAX bit 5).
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1u)) return "AMX";
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 5 & 1u)) return "AVX512-BF16";
#else
  __builtin_cpu_init();
  if (__builtin_cpu_supports("amx-bf16")) return "AMX";
  if (__builtin_cpu_supports("avx512bf16")) return "AVX512-BF16";
#endif
  return "emulated";
}

}  // namespace merak::model
