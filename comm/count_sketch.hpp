#pragma once
// The count sketch of S2 (docs/s2-reducer.md): r rows of width w over the
// element indices x = k·d + c of an (n, d) gradient. Row j has a bucket hash
// h_j: [0, n·d) -> [0, w) and a sign hash s_j -> {-1, +1}, both a 32-bit
// counter-based mixer of x and a key derived from (seed, j), so every rank
// that uses the same seed gets the same hashes with no shared state. When
// w >= n·d the bucket hash is the identity (h_j(x) = x): the sketch is then
// injective and decoding is exact.
//
// Row runs (`row_runs`, S2's default, used when d <= w < n·d): the bucket
// of x = k·d + c is (start_j(k) + c) mod w with start_j(k) hashed from the
// row k alone, so a gradient row lands as one contiguous run of d buckets
// (wrapping at w) and sketching / decoding a row are vectorised adds and
// loads instead of one random access per element. The sign stays hashed per
// element. Two elements of different rows share a bucket with probability
// exactly 1/w (as with per-element buckets), two of the same row never do;
// the estimate stays unbiased with the same variance in expectation.
//
// The table T is r × w floats, row j at T[j·w]. Sketching is linear:
// sketch(a) + sketch(b) = sketch(a + b) up to float rounding.

#include <cstdint>
#include <span>
#include <vector>

namespace merak::comm {

class count_sketch {
 public:
  // Fails on r outside 1..32, w < 1 or a bad (n, d) (see check_rows_shape).
  count_sketch(int rows, int64_t width, int64_t n, int64_t d, uint64_t seed, bool row_runs = false);

  int rows() const { return r_; }
  int64_t width() const { return w_; }
  bool injective() const { return w_ >= n_ * d_; }
  // Whether buckets are row runs (asked for, w >= d and not injective).
  bool row_runs() const { return runs_; }

  // The hashes, for tests: bucket in [0, w), sign ±1.
  uint32_t bucket(int j, uint32_t x) const;
  float sign(int j, uint32_t x) const;

  // T[j][h_j(x)] += s_j(x)·g[x] for every element of the listed rows of g
  // (n, d) and every j. `table` (r·w) is not cleared.
  void add_rows(std::span<const float> g, std::span<const uint32_t> rows,
                std::span<float> table) const;

  // For every element x of the listed rows: median_j(s_j(x)·T[j][h_j(x)]) /
  // divisor (r even: mean of the two middle values). Written either into
  // the rows' own places of an (n, d) matrix (estimate_into) or packed, row
  // i of the list at out[i·d] (estimate_packed, out.size() = rows·d).
  void estimate_into(std::span<const float> table, std::span<const uint32_t> rows, float divisor,
                     std::span<float> g) const;
  void estimate_packed(std::span<const float> table, std::span<const uint32_t> rows, float divisor,
                       std::span<float> out) const;

 private:
  void estimate(std::span<const float> table, std::span<const uint32_t> rows, float divisor,
                float* out, bool packed) const;

  // Bucket of element 0 of row k in sketch row j (row runs).
  uint32_t run_start(int j, uint32_t k) const;

  int r_;
  int64_t w_, n_, d_;
  bool runs_;
  std::vector<uint32_t> bucket_key_, sign_key_;  // per row j
};

}  // namespace merak::comm
