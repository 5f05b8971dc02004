// The count sketch's kernels alone (docs/results/s2-reducer.md, "S2 design choices"):
// times count_sketch::add_rows (one rank's rows) and estimate_into (the
// union of two ranks' rows) on the benchmark's 50,000 x 256 gradient, caches
// flushed (64 MB touched) before each, best of 9. Built as
// build/bin/merak_sketch_kernels:
//
//   build/bin/merak_sketch_kernels DENSITY SKETCH_RATIO [R [HASH]]  (defaults 0.05 0.01 1 rows;
//   HASH rows | elements, see comm/codec.hpp)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>
#include "bench/codec_bench.hpp"
#include "comm/count_sketch.hpp"
#include "comm/row_sparse.hpp"
using namespace merak::comm;
using namespace merak::bench;
using C = std::chrono::steady_clock;
int main(int argc, char** argv) {
  int64_t n = 50000, d = 256;
  double dens = argc > 1 ? atof(argv[1]) : 0.05, y = argc > 2 ? atof(argv[2]) : 0.01;
  int r = argc > 3 ? atoi(argv[3]) : 1;
  const bool runs = !(argc > 4 && std::string(argv[4]) == "elements");
  auto g0 = bench_gradient(n, d, dens, 1, 0), g1 = bench_gradient(n, d, dens, 1, 1);
  std::vector<uint32_t> rows0, rows1, uni;
  nonzero_rows(g0, n, d, rows0);
  nonzero_rows(g1, n, d, rows1);
  std::set_union(rows0.begin(), rows0.end(), rows1.begin(), rows1.end(), std::back_inserter(uni));
  int64_t w = std::max<int64_t>(1, int64_t(y * n * d / r));
  count_sketch s(r, w, n, d, 12345, runs);
  std::vector<float> t(size_t(r * w)), t1(size_t(r * w)), out(size_t(n * d));
  std::vector<float> big(64 << 20 >> 2);
  double be = 1e9, bz = 1e9, bd = 1e9;
  for (int it = 0; it < 9; ++it) {
    for (auto& v : big) v += 1;  // evict caches like the bench's memcpy
    auto a = C::now();
    std::fill(t.begin(), t.end(), 0.f);
    auto b = C::now();
    s.add_rows(g0, rows0, t);
    auto c = C::now();
    std::fill(t1.begin(), t1.end(), 0.f);
    s.add_rows(g1, rows1, t1);
    for (size_t i = 0; i < t.size(); ++i) t[i] += t1[i];
    for (auto& v : big) v += 1;
    auto e0 = C::now();
    s.estimate_into(t, uni, 2.0f, out);
    auto e1 = C::now();
    bz = std::min(bz, std::chrono::duration<double, std::milli>(b - a).count());
    be = std::min(be, std::chrono::duration<double, std::milli>(c - b).count());
    bd = std::min(bd, std::chrono::duration<double, std::milli>(e1 - e0).count());
  }
  // error vs exact
  double num = 0, den = 0;
  for (uint32_t k : uni)
    for (int64_t c = 0; c < d; ++c) {
      size_t x = size_t(k) * d + c;
      double ex = 0.5 * (double(g0[x]) + g1[x]);
      double e = out[x] - ex;
      num += e * e;
      den += ex * ex;
    }
  printf(
      "%s dens %g y %g r %d rows %zu union %zu: zero %.3f ms, add_rows %.3f ms (%.2f ns/el), "
      "estimate "
      "%.3f ms (%.2f ns/el) relerr %.4f\n",
      runs ? "rows" : "elements", dens, y, r, rows0.size(), uni.size(), bz, be,
      be * 1e6 / (rows0.size() * d), bd, bd * 1e6 / (uni.size() * d), std::sqrt(num / den));
}
