// The stage split against the exhaustive O(pp x k^2) dynamic program.
#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <random>

#include "partition/stages.hpp"

using namespace merak::partition;

namespace {

// Every last boundary tried for every (stages, position): the reference.
split_result reference_split(const std::vector<int>& pos, const std::vector<double>& prefix,
                             int pp) {
  const int k = int(pos.size());
  split_result out;
  if (pp > k - 1) return out;
  auto cost = [&](int a, int b) { return prefix[size_t(pos[b])] - prefix[size_t(pos[a])]; };
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(pp + 1, std::vector<double>(k, inf));
  std::vector<std::vector<int>> from(pp + 1, std::vector<int>(k, -1));
  best[0][0] = 0;
  for (int s = 1; s <= pp; ++s)
    for (int j = 1; j < k; ++j)
      for (int i = s - 1; i < j; ++i) {
        if (best[s - 1][i] == inf) continue;
        double c = std::max(best[s - 1][i], cost(i, j));
        if (c < best[s][j]) {
          best[s][j] = c;
          from[s][j] = i;
        }
      }
  out.max_cost = best[pp][k - 1];
  out.bounds.assign(pp + 1, 0);
  int j = k - 1;
  for (int s = pp; s >= 1; --s) {
    out.bounds[s] = pos[j];
    j = from[s][j];
  }
  return out;
}

}  // namespace

TEST_CASE("the stage split is as good as the exhaustive dynamic program, ties included",
          "[partition][stages]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 1 + int(rng() % 40);
    // Small integer costs (many ties, zeros) or spread reals.
    std::vector<double> prefix(n + 1, 0);
    for (int i = 0; i < n; ++i)
      prefix[i + 1] =
          prefix[i] + (trial % 2 ? double(rng() % 4) : std::uniform_real_distribution<>(0, 1)(rng));
    std::vector<int> pos{0};
    for (int c = 1; c < n; ++c)
      if (rng() % 3) pos.push_back(c);
    pos.push_back(n);
    for (int pp = 1; pp <= int(pos.size()); ++pp) {
      auto fast = min_max_split(pos, prefix, pp);
      auto slow = reference_split(pos, prefix, pp);
      INFO("trial " << trial << " n " << n << " pp " << pp);
      if (pp > int(pos.size()) - 1) {  // more stages than steps: no split
        CHECK(fast.bounds.empty());
        CHECK(slow.bounds.empty());
        continue;
      }
      // As good as the exhaustive search, and a real split of that cost:
      // pp non-empty stages at the given positions, the largest costing it.
      CHECK(fast.max_cost <= slow.max_cost * (1 + 1e-12) + 1e-300);
      REQUIRE(fast.bounds.size() == size_t(pp + 1));
      CHECK(fast.bounds.front() == 0);
      CHECK(fast.bounds.back() == n);
      double largest = 0;
      for (int s = 0; s < pp; ++s) {
        CHECK(fast.bounds[s] < fast.bounds[s + 1]);
        CHECK(std::find(pos.begin(), pos.end(), fast.bounds[s + 1]) != pos.end());
        largest = std::max(largest, prefix[fast.bounds[s + 1]] - prefix[fast.bounds[s]]);
      }
      CHECK(largest == fast.max_cost);
    }
  }
}
