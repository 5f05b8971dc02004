#pragma once
// Row-sparse gradients and reference averages for the codec tests.

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "comm/codec.hpp"
#include "core/rng.hpp"

namespace merak::comm::testing {

// An (n, d) gradient whose rows are non-zero with probability `density`
// (every value of a chosen row is non-zero). `dyadic` values are small
// multiples of 1/4, so that every sum of a few of them is exact in float and
// does not depend on the order of summation; otherwise standard normal.
inline std::vector<float> row_sparse_gradient(int64_t n, int64_t d, double density, uint64_t seed,
                                              bool dyadic = false) {
  std::vector<float> g(size_t(n * d), 0.0f);
  rng rows(seed, 1), vals(seed, 2);
  for (int64_t k = 0; k < n; ++k) {
    if (rows.uniform() >= density) continue;
    for (int64_t c = 0; c < d; ++c) {
      float v = dyadic ? float(int(vals.below(16)) - 8) * 0.25f : float(vals.normal());
      if (v == 0.0f) v = 0.25f;
      g[size_t(k * d + c)] = v;
    }
  }
  return g;
}

// ((g_0 + g_1) + g_2) ... / P: the order the pure reduction sums in.
inline std::vector<float> rank_order_average(const std::vector<std::vector<float>>& g) {
  std::vector<float> s = g[0];
  for (size_t r = 1; r < g.size(); ++r)
    for (size_t i = 0; i < s.size(); ++i) s[i] += g[r][i];
  for (float& v : s) v /= float(g.size());
  return s;
}

}  // namespace merak::comm::testing
