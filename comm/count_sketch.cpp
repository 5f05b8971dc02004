#include "comm/count_sketch.hpp"

#include <algorithm>
#include <bit>

#include "comm/row_sparse.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"

namespace merak::comm {

namespace {

// lowbias32 (C. Wellons): a bijection of 32-bit integers with good
// avalanche, plain integer ops so loops over x vectorise.
inline uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// Lemire's multiply-shift: maps a uniform 32-bit h onto [0, w).
inline uint32_t reduce_to(uint32_t h, uint64_t w) {
  return uint32_t((uint64_t(h) * w) >> 32);
}

// The sign hash as a bit to XOR into a float's sign.
inline uint32_t sign_bit(uint32_t key, uint32_t x) {
  return mix32(x ^ key) & 0x80000000u;
}

// Elements are hashed in blocks: indices and signed values are computed into
// small arrays (vectorised), then scattered or gathered (scalar).
constexpr int64_t block = 256;
constexpr int64_t prefetch_distance = 24;

}  // namespace

count_sketch::count_sketch(int rows, int64_t width, int64_t n, int64_t d, uint64_t seed)
    : r_(rows), w_(width), n_(n), d_(d) {
  if (rows < 1 || rows > 32) fail("count sketch: rows r={} must be in 1..32", rows);
  if (width < 1 || width > (int64_t(1) << 32))
    fail("count sketch: width w={} must be in 1..2^32", width);
  if (n <= 0 || d <= 0 || n >= (int64_t(1) << 32) / d)
    fail("count sketch: gradient n={} d={} must be positive with n*d < 2^32", n, d);
  for (int j = 0; j < rows; ++j) {
    const uint64_t k = mix64(seed ^ mix64(0x5332u + uint64_t(j)));  // "S2"
    bucket_key_.push_back(uint32_t(k));
    sign_key_.push_back(uint32_t(k >> 32));
  }
}

uint32_t count_sketch::bucket(int j, uint32_t x) const {
  return injective() ? x : reduce_to(mix32(x ^ bucket_key_[j]), uint64_t(w_));
}

float count_sketch::sign(int j, uint32_t x) const {
  return sign_bit(sign_key_[j], x) ? -1.0f : 1.0f;
}

void count_sketch::add_rows(std::span<const float> g, std::span<const uint32_t> rows,
                            std::span<float> table) const {
  MERAK_CHECK(int64_t(g.size()) == n_ * d_ && int64_t(table.size()) == r_ * w_);
  alignas(64) uint32_t idx[block];
  alignas(64) float val[block];
  const bool ident = injective();
  const uint64_t w = uint64_t(w_);
  for (int j = 0; j < r_; ++j) {
    float* t = table.data() + j * w_;
    const uint32_t bk = bucket_key_[j], sk = sign_key_[j];
    for (uint32_t k : rows) {
      MERAK_CHECK(k < n_, "row {} of n={}", k, n_);
      const float* src = g.data() + int64_t(k) * d_;
      const uint32_t base = uint32_t(int64_t(k) * d_);
      for (int64_t c0 = 0; c0 < d_; c0 += block) {
        const int64_t m = std::min(block, d_ - c0);
        for (int64_t c = 0; c < m; ++c) {
          const uint32_t x = base + uint32_t(c0 + c);
          idx[c] = ident ? x : reduce_to(mix32(x ^ bk), w);
          val[c] = std::bit_cast<float>(std::bit_cast<uint32_t>(src[c0 + c]) ^ sign_bit(sk, x));
        }
        for (int64_t c = 0; c < m; ++c) {
          if (c + prefetch_distance < m) __builtin_prefetch(t + idx[c + prefetch_distance], 1);
          t[idx[c]] += val[c];
        }
      }
    }
  }
}

void count_sketch::estimate_into(std::span<const float> table, std::span<const uint32_t> rows,
                                 float divisor, std::span<float> g) const {
  MERAK_CHECK(int64_t(g.size()) == n_ * d_);
  estimate(table, rows, divisor, g.data(), false);
}

void count_sketch::estimate_packed(std::span<const float> table, std::span<const uint32_t> rows,
                                   float divisor, std::span<float> out) const {
  MERAK_CHECK(out.size() == rows.size() * size_t(d_));
  estimate(table, rows, divisor, out.data(), true);
}

void count_sketch::estimate(std::span<const float> table, std::span<const uint32_t> rows,
                            float divisor, float* out, bool packed) const {
  MERAK_CHECK(int64_t(table.size()) == r_ * w_);
  alignas(64) uint32_t idx[block];
  alignas(64) float est[32][block];  // est[j][c]: row j's estimate of element c
  float vals[32];
  const bool ident = injective();
  const uint64_t w = uint64_t(w_);
  for (size_t i = 0; i < rows.size(); ++i) {
    const uint32_t k = rows[i];
    MERAK_CHECK(k < n_, "row {} of n={}", k, n_);
    float* dst = out + (packed ? int64_t(i) : int64_t(k)) * d_;
    const uint32_t base = uint32_t(int64_t(k) * d_);
    for (int64_t c0 = 0; c0 < d_; c0 += block) {
      const int64_t m = std::min(block, d_ - c0);
      for (int j = 0; j < r_; ++j) {
        const float* t = table.data() + j * w_;
        const uint32_t bk = bucket_key_[j], sk = sign_key_[j];
        for (int64_t c = 0; c < m; ++c) {
          const uint32_t x = base + uint32_t(c0 + c);
          idx[c] = ident ? x : reduce_to(mix32(x ^ bk), w);
        }
        for (int64_t c = 0; c < m; ++c) {
          const uint32_t x = base + uint32_t(c0 + c);
          est[j][c] = std::bit_cast<float>(std::bit_cast<uint32_t>(t[idx[c]]) ^ sign_bit(sk, x));
        }
      }
      if (r_ == 1) {
        for (int64_t c = 0; c < m; ++c) dst[c0 + c] = est[0][c] / divisor;
        continue;
      }
      for (int64_t c = 0; c < m; ++c) {
        for (int j = 0; j < r_; ++j) vals[j] = est[j][c];
        std::sort(vals, vals + r_);
        const float med = r_ % 2 ? vals[r_ / 2] : 0.5f * (vals[r_ / 2 - 1] + vals[r_ / 2]);
        dst[c0 + c] = med / divisor;
      }
    }
  }
}

}  // namespace merak::comm
