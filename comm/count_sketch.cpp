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

// Elements are hashed in blocks of columns: indices and signs are computed
// into small arrays (vectorised), then used by the add / load loops.
constexpr int64_t block = 256;

// The sign hash (docs/s2-reducer.md, "S2 details"): a row's columns are cut
// into groups of 32; element x = k·d + c takes bit c mod 32 of the word
// mix32(g ^ key) of its group, g = k·d + 32·⌊c/32⌋ (the group's first
// element, unique per group). One mix per 32 elements instead of one per
// element keeps the mix from dominating the kernels (docs/results/
// s2-reducer.md, "S2 design choices").
constexpr int64_t kgroup = 32;

// sgn[i] = the sign bit (0 or 0x80000000, to XOR into a float) of column
// c0 + i of the row whose element 0 is x_row, for i < m; c0 a multiple of 32.
// Writes whole groups: sgn holds at least m rounded up to 32 entries.
inline void fill_signs(uint32_t* __restrict sgn, uint32_t x_row, int64_t c0, int64_t m,
                       uint32_t key) {
  for (int64_t q = 0; q < m; q += kgroup) {
    const uint32_t word = mix32((x_row + uint32_t(c0 + q)) ^ key);
    for (int64_t i = 0; i < kgroup; ++i) sgn[q + i] = (word >> i) << 31;
  }
}

// Rows prefetched ahead of the one being sketched or estimated.
constexpr size_t kahead_rows = 2;

// Prefetches the d floats at p (for writing when `write`), one cache line
// at a time, at most the first 64 lines (rows longer than 4 KiB are
// streamed well enough by the hardware prefetcher).
inline void prefetch_row(const float* p, int64_t d, bool write) {
  const int64_t lines = std::min<int64_t>((d * 4 + 63) / 64, 64);
  const char* c = reinterpret_cast<const char*>(p);
  for (int64_t l = 0; l < lines; ++l) {
    if (write)
      __builtin_prefetch(c + l * 64, 1, 3);
    else
      __builtin_prefetch(c + l * 64, 0, 3);
  }
}

// t[c] += s[c]·src[c] for c in [0, m), the sign bits from fill_signs
// (vectorises).
inline void add_signed(float* __restrict t, const float* __restrict src,
                       const uint32_t* __restrict sgn, int64_t m) {
  for (int64_t c = 0; c < m; ++c)
    t[c] += std::bit_cast<float>(std::bit_cast<uint32_t>(src[c]) ^ sgn[c]);
}

// e[c] = s[c]·t[c] for c in [0, m).
inline void load_signed(float* __restrict e, const float* __restrict t,
                        const uint32_t* __restrict sgn, int64_t m) {
  for (int64_t c = 0; c < m; ++c)
    e[c] = std::bit_cast<float>(std::bit_cast<uint32_t>(t[c]) ^ sgn[c]);
}

// r = 1: o[c] = s[c]·t[c] / p for c in [0, m), rounded as divide_floats
// rounds (x·inv when `exact`, i.e. inv = 1/p exactly).
inline void load_signed_divided(float* __restrict o, const float* __restrict t,
                                const uint32_t* __restrict sgn, int64_t m, float p, float inv,
                                bool exact) {
  auto signed_value = [&](int64_t c) {
    return std::bit_cast<float>(std::bit_cast<uint32_t>(t[c]) ^ sgn[c]);
  };
  if (exact) {
    for (int64_t c = 0; c < m; ++c) o[c] = signed_value(c) * inv;
  } else {
    for (int64_t c = 0; c < m; ++c) o[c] = signed_value(c) / p;
  }
}

// Row runs: the columns [c0, c0 + m) of a row whose run starts at bucket
// `start` are the buckets [at, at + first) and then [0, m - first) of the
// table row (at most one wrap, since m <= d <= w).
struct run_piece {
  int64_t at, first;
};
inline run_piece piece_of(int64_t start, int64_t c0, int64_t m, int64_t w) {
  int64_t at = start + c0;
  if (at >= w) at -= w;
  return {at, std::min(m, w - at)};
}

}  // namespace

count_sketch::count_sketch(int rows, int64_t width, int64_t n, int64_t d, uint64_t seed,
                           bool row_runs)
    : r_(rows), w_(width), n_(n), d_(d), runs_(false) {
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
  runs_ = row_runs && !injective() && w_ >= d_;
}

uint32_t count_sketch::run_start(int j, uint32_t k) const {
  // Another key than the element hash's (k is a row, not an element).
  return reduce_to(mix32(k ^ bucket_key_[j] ^ 0x9e3779b9u), uint64_t(w_));
}

uint32_t count_sketch::bucket(int j, uint32_t x) const {
  if (runs_) {
    const uint64_t b = uint64_t(run_start(j, uint32_t(x / d_))) + x % d_;
    return uint32_t(b >= uint64_t(w_) ? b - uint64_t(w_) : b);
  }
  return injective() ? x : reduce_to(mix32(x ^ bucket_key_[j]), uint64_t(w_));
}

float count_sketch::sign(int j, uint32_t x) const {
  const uint32_t c = uint32_t(x % uint64_t(d_)) % uint32_t(kgroup);  // bit of its group's word
  return (mix32((x - c) ^ sign_key_[j]) >> c) & 1u ? -1.0f : 1.0f;
}

void count_sketch::add_rows(std::span<const float> g, std::span<const uint32_t> rows,
                            std::span<float> table) const {
  MERAK_CHECK(int64_t(g.size()) == n_ * d_ && int64_t(table.size()) == r_ * w_);
  alignas(64) uint32_t idx[block];
  alignas(64) uint32_t sgn[block];
  const bool ident = injective();
  const uint64_t w = uint64_t(w_);
  // Row-major over the gradient: each row is read from memory once for all r
  // sketch rows, and the rows ahead are prefetched (the listed rows are
  // scattered over n·d floats, so the hardware prefetcher does not see them
  // coming).
  for (size_t i = 0; i < rows.size(); ++i) {
    const uint32_t k = rows[i];
    MERAK_CHECK(k < n_, "row {} of n={}", k, n_);
    if (i + kahead_rows < rows.size())
      prefetch_row(g.data() + int64_t(rows[i + kahead_rows]) * d_, d_, false);
    const float* src = g.data() + int64_t(k) * d_;
    const uint32_t base = uint32_t(int64_t(k) * d_);
    for (int j = 0; j < r_; ++j) {
      float* t = table.data() + j * w_;
      const uint32_t bk = bucket_key_[j];
      const int64_t start = runs_ ? int64_t(run_start(j, k)) : 0;
      for (int64_t c0 = 0; c0 < d_; c0 += block) {
        const int64_t m = std::min(block, d_ - c0);
        fill_signs(sgn, base, c0, m, sign_key_[j]);
        if (runs_) {  // one contiguous run, at most two pieces
          const run_piece p = piece_of(start, c0, m, w_);
          add_signed(t + p.at, src + c0, sgn, p.first);
          add_signed(t, src + c0 + p.first, sgn + p.first, m - p.first);
          continue;
        }
        if (ident) {
          for (int64_t c = 0; c < m; ++c) idx[c] = base + uint32_t(c0 + c);
        } else {
          for (int64_t c = 0; c < m; ++c)
            idx[c] = reduce_to(mix32((base + uint32_t(c0 + c)) ^ bk), w);
        }
        for (int64_t c = 0; c < m; ++c)
          t[idx[c]] += std::bit_cast<float>(std::bit_cast<uint32_t>(src[c0 + c]) ^ sgn[c]);
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
  alignas(64) uint32_t sgn[block];
  alignas(64) float est[32][block];  // est[j][c]: row j's estimate of element c
  float vals[32];
  const bool ident = injective();
  const uint64_t w = uint64_t(w_);
  float inv = 0;
  const bool exact = exact_inverse(divisor, inv);
  for (size_t i = 0; i < rows.size(); ++i) {
    const uint32_t k = rows[i];
    MERAK_CHECK(k < n_, "row {} of n={}", k, n_);
    if (i + kahead_rows < rows.size()) {
      const int64_t ahead = packed ? int64_t(i + kahead_rows) : int64_t(rows[i + kahead_rows]);
      prefetch_row(out + ahead * d_, d_, true);
    }
    float* dst = out + (packed ? int64_t(i) : int64_t(k)) * d_;
    const uint32_t base = uint32_t(int64_t(k) * d_);
    const int64_t start0 = runs_ ? int64_t(run_start(0, k)) : 0;
    for (int64_t c0 = 0; c0 < d_; c0 += block) {
      const int64_t m = std::min(block, d_ - c0);
      if (runs_ && r_ == 1) {
        // The common case in one pass: signed loads of the run, divided, straight
        // into the row (no per-block copy through est).
        fill_signs(sgn, base, c0, m, sign_key_[0]);
        const run_piece p = piece_of(start0, c0, m, w_);
        load_signed_divided(dst + c0, table.data() + p.at, sgn, p.first, divisor, inv, exact);
        load_signed_divided(dst + c0 + p.first, table.data(), sgn + p.first, m - p.first, divisor,
                            inv, exact);
        continue;
      }
      for (int j = 0; j < r_; ++j) {
        const float* t = table.data() + j * w_;
        fill_signs(sgn, base, c0, m, sign_key_[j]);
        if (runs_) {
          const run_piece p = piece_of(int64_t(run_start(j, k)), c0, m, w_);
          load_signed(est[j], t + p.at, sgn, p.first);
          load_signed(est[j] + p.first, t, sgn + p.first, m - p.first);
          continue;
        }
        if (ident) {
          for (int64_t c = 0; c < m; ++c) idx[c] = base + uint32_t(c0 + c);
        } else {
          const uint32_t bk = bucket_key_[j];
          for (int64_t c = 0; c < m; ++c)
            idx[c] = reduce_to(mix32((base + uint32_t(c0 + c)) ^ bk), w);
        }
        float* e = est[j];
        for (int64_t c = 0; c < m; ++c) e[c] = t[idx[c]];
        for (int64_t c = 0; c < m; ++c)
          e[c] = std::bit_cast<float>(std::bit_cast<uint32_t>(e[c]) ^ sgn[c]);
      }
      float* o = dst + c0;
      if (r_ == 1) {
        divide_floats(o, est[0], size_t(m), divisor);
      } else if (r_ == 3) {
        // Median of three as a min/max network (vectorises): the same value
        // as sorting the three (no NaN among them).
        const float *a = est[0], *b = est[1], *e = est[2];
        for (int64_t c = 0; c < m; ++c) {
          const float lo = std::min(a[c], b[c]), hi = std::max(a[c], b[c]);
          o[c] = std::max(lo, std::min(hi, e[c]));
        }
        divide_floats(o, o, size_t(m), divisor);
      } else {
        for (int64_t c = 0; c < m; ++c) {
          for (int j = 0; j < r_; ++j) vals[j] = est[j][c];
          // Insertion sort: r is small (<= 32).
          for (int a = 1; a < r_; ++a)
            for (int b = a; b > 0 && vals[b] < vals[b - 1]; --b) std::swap(vals[b], vals[b - 1]);
          const float med = r_ % 2 ? vals[r_ / 2] : 0.5f * (vals[r_ / 2 - 1] + vals[r_ / 2]);
          o[c] = med / divisor;
        }
      }
    }
  }
}

}  // namespace merak::comm
