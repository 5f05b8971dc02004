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

// Row runs: t[c] += s(x0 + c)·src[c] for c in [0, m) (vectorises).
inline void add_run(float* __restrict t, const float* __restrict src, uint32_t x0, uint32_t sk,
                    int64_t m) {
  for (int64_t c = 0; c < m; ++c)
    t[c] += std::bit_cast<float>(std::bit_cast<uint32_t>(src[c]) ^ sign_bit(sk, x0 + uint32_t(c)));
}

// Row runs: e[c] = s(x0 + c)·t[c] for c in [0, m).
inline void load_run(float* __restrict e, const float* __restrict t, uint32_t x0, uint32_t sk,
                     int64_t m) {
  for (int64_t c = 0; c < m; ++c)
    e[c] = std::bit_cast<float>(std::bit_cast<uint32_t>(t[c]) ^ sign_bit(sk, x0 + uint32_t(c)));
}

// Row runs, r = 1: o[c] = s(x0 + c)·t[c] / p for c in [0, m), rounded as
// divide_floats rounds (x·inv when `exact`, i.e. inv = 1/p exactly).
inline void load_run_divided(float* __restrict o, const float* __restrict t, uint32_t x0,
                             uint32_t sk, int64_t m, float p, float inv, bool exact) {
  auto signed_value = [&](int64_t c) {
    return std::bit_cast<float>(std::bit_cast<uint32_t>(t[c]) ^ sign_bit(sk, x0 + uint32_t(c)));
  };
  if (exact) {
    for (int64_t c = 0; c < m; ++c) o[c] = signed_value(c) * inv;
  } else {
    for (int64_t c = 0; c < m; ++c) o[c] = signed_value(c) / p;
  }
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
  return sign_bit(sign_key_[j], x) ? -1.0f : 1.0f;
}

void count_sketch::add_rows(std::span<const float> g, std::span<const uint32_t> rows,
                            std::span<float> table) const {
  MERAK_CHECK(int64_t(g.size()) == n_ * d_ && int64_t(table.size()) == r_ * w_);
  alignas(64) uint32_t idx[block];
  alignas(64) float val[block];
  const bool ident = injective();
  const uint64_t w = uint64_t(w_);
  // Row-major over the gradient: each row is read from memory once for all r
  // sketch rows, and the rows ahead are prefetched (the listed rows are
  // scattered over n·d floats, so the hardware prefetcher does not see them
  // coming: reading them cold cost ~2 ns per element before).
  for (size_t i = 0; i < rows.size(); ++i) {
    const uint32_t k = rows[i];
    MERAK_CHECK(k < n_, "row {} of n={}", k, n_);
    if (i + kahead_rows < rows.size())
      prefetch_row(g.data() + int64_t(rows[i + kahead_rows]) * d_, d_, false);
    const float* src = g.data() + int64_t(k) * d_;
    const uint32_t base = uint32_t(int64_t(k) * d_);
    if (runs_) {
      for (int j = 0; j < r_; ++j) {
        // Two contiguous pieces: [start, w) then [0, rest) of the table.
        const int64_t start = run_start(j, k), first = std::min(d_, w_ - start);
        add_run(table.data() + j * w_ + start, src, base, sign_key_[j], first);
        add_run(table.data() + j * w_, src + first, base + uint32_t(first), sign_key_[j],
                d_ - first);
      }
      continue;
    }
    for (int j = 0; j < r_; ++j) {
      float* t = table.data() + j * w_;
      const uint32_t bk = bucket_key_[j], sk = sign_key_[j];
      for (int64_t c0 = 0; c0 < d_; c0 += block) {
        const int64_t m = std::min(block, d_ - c0);
        if (ident) {
          for (int64_t c = 0; c < m; ++c) idx[c] = base + uint32_t(c0 + c);
        } else {
          for (int64_t c = 0; c < m; ++c)
            idx[c] = reduce_to(mix32((base + uint32_t(c0 + c)) ^ bk), w);
        }
        for (int64_t c = 0; c < m; ++c) {
          const uint32_t x = base + uint32_t(c0 + c);
          val[c] = std::bit_cast<float>(std::bit_cast<uint32_t>(src[c0 + c]) ^ sign_bit(sk, x));
        }
        for (int64_t c = 0; c < m; ++c) t[idx[c]] += val[c];
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
    if (runs_ && r_ == 1) {
      // The common case in one pass: signed loads of the run, divided, straight
      // into the row (no per-block copy through est).
      const int64_t start = run_start(0, k), first = std::min(d_, w_ - start);
      load_run_divided(dst, table.data() + start, base, sign_key_[0], first, divisor, inv, exact);
      load_run_divided(dst + first, table.data(), base + uint32_t(first), sign_key_[0], d_ - first,
                       divisor, inv, exact);
      continue;
    }
    for (int64_t c0 = 0; c0 < d_; c0 += block) {
      const int64_t m = std::min(block, d_ - c0);
      for (int j = 0; j < r_; ++j) {
        const float* t = table.data() + j * w_;
        const uint32_t bk = bucket_key_[j], sk = sign_key_[j];
        if (runs_) {
          int64_t at = int64_t(run_start(j, k)) + c0;
          if (at >= w_) at -= w_;
          const int64_t first = std::min(m, w_ - at);
          load_run(est[j], t + at, base + uint32_t(c0), sk, first);
          load_run(est[j] + first, t, base + uint32_t(c0 + first), sk, m - first);
          continue;
        }
        if (ident) {
          for (int64_t c = 0; c < m; ++c) idx[c] = base + uint32_t(c0 + c);
        } else {
          for (int64_t c = 0; c < m; ++c)
            idx[c] = reduce_to(mix32((base + uint32_t(c0 + c)) ^ bk), w);
        }
        float* e = est[j];
        for (int64_t c = 0; c < m; ++c) e[c] = t[idx[c]];
        for (int64_t c = 0; c < m; ++c) {
          const uint32_t x = base + uint32_t(c0 + c);
          e[c] = std::bit_cast<float>(std::bit_cast<uint32_t>(e[c]) ^ sign_bit(sk, x));
        }
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
