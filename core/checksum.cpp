#include "core/checksum.hpp"

#include <array>
#include <cstring>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

namespace merak {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kTable = make_table();

}  // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  auto p = static_cast<const unsigned char*>(data);
  crc = ~crc;
#if defined(__SSE4_2__)
  uint64_t c64 = crc;
  while (size >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
    p += 8;
    size -= 8;
  }
  crc = static_cast<uint32_t>(c64);
  while (size--) crc = _mm_crc32_u8(crc, *p++);
#else
  while (size--) crc = kTable[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
#endif
  return ~crc;
}

bool same_secret(const char* a, size_t a_size, const char* b, size_t b_size) {
  unsigned char diff = a_size == b_size ? 0 : 1;
  const size_t n = a_size < b_size ? a_size : b_size;
  for (size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace merak
