#include "comm/row_sparse.hpp"

#include <bit>
#include <cmath>
#include <cstring>

#include "core/error.hpp"

namespace merak::comm {

void check_rows_shape(std::span<const float> g, int64_t n, int64_t d, const char* who) {
  if (n <= 0 || d <= 0) fail("{}: gradient shape n={} d={} must be positive", who, n, d);
  if (n >= (int64_t(1) << 32) / d)
    fail("{}: gradient n={} d={} has n*d >= 2^32 elements (indices are 32-bit)", who, n, d);
  if (int64_t(g.size()) != n * d)
    fail("{}: gradient holds {} floats, but n={} d={} needs {}", who, g.size(), n, d, n * d);
}

void nonzero_rows(std::span<const float> g, int64_t n, int64_t d, std::vector<uint32_t>& rows) {
  rows.clear();
  const float* p = g.data();
  for (int64_t k = 0; k < n; ++k, p += d) {
    // OR of the magnitude bits: non-zero iff some value is not ±0.
    uint32_t acc = 0;
    for (int64_t c = 0; c < d; ++c) acc |= std::bit_cast<uint32_t>(p[c]) & 0x7fffffffu;
    if (acc) rows.push_back(uint32_t(k));
  }
}

void rows_to_bitmap(std::span<const uint32_t> rows, int64_t n, std::vector<uint64_t>& bits) {
  bits.assign(size_t(bitmap_words(n)), 0);
  for (uint32_t k : rows) bits[k >> 6] |= uint64_t(1) << (k & 63);
}

void bitmap_to_rows(std::span<const uint64_t> bits, std::vector<uint32_t>& rows) {
  rows.clear();
  for (size_t w = 0; w < bits.size(); ++w)
    for (uint64_t b = bits[w]; b; b &= b - 1)
      rows.push_back(uint32_t(w * 64 + size_t(std::countr_zero(b))));
}

namespace {
template <typename F>
void map_floats(float* dst, const float* src, size_t n, F f) {
  if (dst == src) {  // in place: no aliasing question for the vectoriser
    for (size_t i = 0; i < n; ++i) dst[i] = f(dst[i]);
  } else {
    float* __restrict d = dst;
    const float* __restrict s = src;
    for (size_t i = 0; i < n; ++i) d[i] = f(s[i]);
  }
}
}  // namespace

bool exact_inverse(float p, float& inv) {
  int e = 0;
  if (!(std::isnormal(p) && std::frexp(p, &e) == 0.5f)) return false;  // p = 2^(e-1)?
  inv = 1.0f / p;
  return true;
}

void divide_floats(float* dst, const float* src, size_t n, float p) {
  float inv = 0;
  if (exact_inverse(p, inv)) {
    map_floats(dst, src, n, [inv](float v) { return v * inv; });
  } else {
    map_floats(dst, src, n, [p](float v) { return v / p; });
  }
}

}  // namespace merak::comm
