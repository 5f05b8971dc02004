#pragma once
// Row-sparse helpers shared by the codecs: finding the non-zero rows of an
// (n, d) row-major f32 matrix, and the packed bitmap of rows that S2 and the
// union codec OR-reduce. Bitmap layout: ceil(n/64) little-endian u64 words,
// row k is bit (k % 64) of word k / 64; bits past n are zero.

#include <cstdint>
#include <span>
#include <vector>

namespace merak::comm {

// Fails (merak::error naming n, d and the size) unless n > 0, d > 0,
// n·d < 2^32 (element indices are 32-bit) and g.size() == n·d. `who` names
// the caller in the message.
void check_rows_shape(std::span<const float> g, int64_t n, int64_t d, const char* who);

// Rows holding a value other than ±0 (NaN counts), increasing. Reads all of
// g once; vectorised.
void nonzero_rows(std::span<const float> g, int64_t n, int64_t d, std::vector<uint32_t>& rows);

inline int64_t bitmap_words(int64_t n) {
  return (n + 63) / 64;
}
// bits := bitmap of `rows` (each < n); resized to bitmap_words(n).
void rows_to_bitmap(std::span<const uint32_t> rows, int64_t n, std::vector<uint64_t>& bits);
// rows := set bits, increasing.
void bitmap_to_rows(std::span<const uint64_t> bits, std::vector<uint32_t>& rows);

// dst[i] = src[i] / p for i < n (dst may equal src). When p is a power of two
// this multiplies by 1/p, which gives the same bits (both round x/p once)
// without the vector division's throughput limit.
void divide_floats(float* dst, const float* src, size_t n, float p);

// True, with inv = 1/p, when p is a power of two (then x·inv rounds exactly
// as x/p does): the test divide_floats makes, for kernels that fuse it.
bool exact_inverse(float p, float& inv);

}  // namespace merak::comm
