// The count sketch and the S2 codec, without a transport.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "codec_test_util.hpp"
#include "comm/codec.hpp"
#include "comm/count_sketch.hpp"
#include "comm/row_sparse.hpp"
#include "comm/s2.hpp"

using namespace merak;
using namespace merak::comm;
using merak::comm::relative_l2_error;
using merak::comm::testing::rank_order_average;
using merak::comm::testing::row_sparse_gradient;

namespace {

std::vector<uint32_t> all_rows(int64_t n) {
  std::vector<uint32_t> rows(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) rows[size_t(k)] = uint32_t(k);
  return rows;
}

// P codecs of one config, stepped together.
struct group {
  std::vector<std::unique_ptr<codec>> owned;
  std::vector<codec*> codecs;
  group(const codec_config& config, int P) {
    for (int r = 0; r < P; ++r) {
      owned.push_back(make_codec(config));
      codecs.push_back(owned.back().get());
    }
  }
  // One step on copies of g; returns each rank's result.
  std::vector<std::vector<float>> step(std::vector<std::vector<float>> g, int64_t n, int64_t d) {
    std::vector<std::span<float>> spans(g.begin(), g.end());
    run_codecs(codecs, spans, n, d);
    return g;
  }
};

}  // namespace

TEST_CASE("buckets fall below w, signs are +-1, and w >= n*d makes the buckets the identity",
          "[s2]") {
  count_sketch narrow(3, 97, 100, 10, 5);
  CHECK_FALSE(narrow.injective());
  std::vector<int> hits(97, 0);
  for (uint32_t x = 0; x < 1000; ++x)
    for (int j = 0; j < 3; ++j) {
      const uint32_t b = narrow.bucket(j, x);
      REQUIRE(b < 97);
      ++hits[b];
      const float s = narrow.sign(j, x);
      REQUIRE((s == 1.0f || s == -1.0f));
    }
  for (int h : hits) CHECK(h > 0);  // 3000 draws fill 97 buckets
  count_sketch wide(2, 1000, 100, 10, 5);
  CHECK(wide.injective());
  for (uint32_t x = 0; x < 1000; ++x) CHECK(wide.bucket(1, x) == x);
}

TEST_CASE("row runs: a row's elements take consecutive buckets mod w, each added with its sign",
          "[s2]") {
  const int64_t n = 30, d = 8, w = 50;
  count_sketch s(2, w, n, d, 7, true);
  REQUIRE(s.row_runs());
  std::vector<int> starts;
  for (uint32_t k = 0; k < n; ++k)
    for (int j = 0; j < 2; ++j) {
      const uint32_t b0 = s.bucket(j, k * d);
      starts.push_back(int(b0));
      for (uint32_t c = 0; c < d; ++c) CHECK(s.bucket(j, k * d + c) == (b0 + c) % w);
    }
  std::sort(starts.begin(), starts.end());
  CHECK(std::unique(starts.begin(), starts.end()) - starts.begin() > 20);  // hashed, not fixed
  // One element at a time: add_rows puts s_j(x)·v at T[j][h_j(x)], nothing
  // else, and estimate_into reads it back exactly (no collision).
  for (uint32_t x : {0u, 7u, 13u, 100u, 239u}) {
    std::vector<float> g(size_t(n * d), 0.0f), t(size_t(2 * w), 0.0f), out(g.size(), 0.0f);
    g[x] = 3.0f;
    const std::vector<uint32_t> row = {x / uint32_t(d)};
    s.add_rows(g, row, t);
    for (int j = 0; j < 2; ++j)
      for (int64_t b = 0; b < w; ++b)
        CHECK(t[size_t(j * w + b)] == (b == s.bucket(j, x) ? 3.0f * s.sign(j, x) : 0.0f));
    s.estimate_into(t, row, 1.0f, out);
    CHECK(out == g);
  }
  // Narrower than a row, or injective: elements are hashed on their own.
  CHECK_FALSE(count_sketch(1, d - 1, n, d, 7, true).row_runs());
  CHECK_FALSE(count_sketch(1, n * d, n, d, 7, true).row_runs());
  CHECK_FALSE(count_sketch(1, w, n, d, 7, false).row_runs());
}

TEST_CASE("every element of rows wider than a sign group is added and read with sign(j, x)",
          "[s2]") {
  // Signs come one bit per element from a word per group of 32 columns: d =
  // 70 is two whole groups and a partial one, and w = 97 makes many runs
  // wrap. Each element alone: add_rows puts s_j(x)·v at T[j][h_j(x)] and
  // nothing else, and estimate_into reads it back exactly (row runs; with
  // element buckets the row's other elements may collide with it).
  const int64_t n = 40, d = 70, w = 97;
  for (bool runs : {true, false}) {
    count_sketch s(2, w, n, d, 11, runs);
    REQUIRE(s.row_runs() == runs);
    for (uint32_t k : {0u, 17u, 39u})
      for (uint32_t c = 0; c < d; ++c) {
        const uint32_t x = k * uint32_t(d) + c;
        std::vector<float> g(size_t(n * d), 0.0f), t(size_t(2 * w), 0.0f), out(g.size(), 0.0f);
        g[x] = 1.5f;
        const std::vector<uint32_t> row = {k};
        s.add_rows(g, row, t);
        INFO("runs " << runs << " row " << k << " column " << c);
        for (int j = 0; j < 2; ++j)
          for (int64_t b = 0; b < w; ++b)
            REQUIRE(t[size_t(j * w + b)] == (b == s.bucket(j, x) ? 1.5f * s.sign(j, x) : 0.0f));
        s.estimate_into(t, row, 1.0f, out);
        if (runs)
          REQUIRE(out == g);  // a run has no collision within its row
        else
          REQUIRE(out[x] == g[x]);  // other elements of the row may share its buckets
      }
  }
  // The signs are balanced and vary within a row and within a group.
  count_sketch s(1, w, n, d, 12, true);
  int negative = 0, constant_rows = 0, constant_groups = 0;
  for (uint32_t k = 0; k < n; ++k) {
    int row_neg = 0;
    for (uint32_t c = 0; c < d; ++c) row_neg += s.sign(0, k * uint32_t(d) + c) < 0;
    negative += row_neg;
    constant_rows += row_neg == 0 || row_neg == d;
    for (uint32_t g0 = 0; g0 + 32 <= d; g0 += 32) {
      int group_neg = 0;
      for (uint32_t c = g0; c < g0 + 32; ++c) group_neg += s.sign(0, k * uint32_t(d) + c) < 0;
      constant_groups += group_neg == 0 || group_neg == 32;
    }
  }
  CHECK(std::abs(double(negative) / double(n * d) - 0.5) < 0.05);  // 2,800 signs: sd 0.0095
  CHECK(constant_rows == 0);
  CHECK(constant_groups == 0);
}

TEST_CASE("the sketch is linear: sketch(a) + sketch(b) equals sketch(a + b)", "[s2]") {
  const int64_t n = 200, d = 16;
  const auto a = row_sparse_gradient(n, d, 0.3, 1), b = row_sparse_gradient(n, d, 0.3, 2);
  std::vector<float> ab(a.size());
  for (size_t i = 0; i < a.size(); ++i) ab[i] = a[i] + b[i];
  const bool runs = GENERATE(false, true);
  count_sketch s(3, 250, n, d, 42, runs);  // 3200 elements in 250 buckets: many collisions
  REQUIRE(s.row_runs() == runs);
  std::vector<float> ta(750, 0.0f), tb(750, 0.0f), tab(750, 0.0f);
  const auto rows = all_rows(n);
  s.add_rows(a, rows, ta);
  s.add_rows(b, rows, tb);
  s.add_rows(ab, rows, tab);
  double err = 0, mag = 0;
  for (size_t i = 0; i < tab.size(); ++i) {
    err = std::max(err, double(std::abs(ta[i] + tb[i] - tab[i])));
    mag = std::max(mag, double(std::abs(tab[i])));
  }
  CHECK(mag > 1);
  CHECK(err <= 1e-5 * mag * 40);  // ~40 terms per bucket, float rounding
}

TEST_CASE("S2 with w >= n*d equals the exact average bit for bit (r = 1 and r = 3)", "[s2]") {
  const int64_t n = 120, d = 24;
  for (int r : {1, 3})
    for (int P = 1; P <= 4; ++P) {
      std::vector<std::vector<float>> g;
      for (int k = 0; k < P; ++k) g.push_back(row_sparse_gradient(n, d, 0.2, 31 * P + k));
      const auto ref = rank_order_average(g);
      group grp({.kind = codec_kind::s2, .sketch_rows = r, .sketch_width = n * d}, P);
      const auto out = grp.step(g, n, d);
      INFO("r=" << r << " P=" << P);
      for (auto& o : out) CHECK(std::memcmp(o.data(), ref.data(), ref.size() * 4) == 0);
    }
}

TEST_CASE("a narrow S2 sketch is noisy but zero outside the union and exact in the bitmap",
          "[s2]") {
  const int64_t n = 400, d = 32;
  std::vector<std::vector<float>> g;
  for (int k = 0; k < 3; ++k) g.push_back(row_sparse_gradient(n, d, 0.05, 900 + k));
  const auto ref = rank_order_average(g);
  group grp({.kind = codec_kind::s2, .sketch_ratio = 0.05}, 3);
  const auto out = grp.step(g, n, d);
  std::vector<uint32_t> ref_rows, out_rows;
  nonzero_rows(ref, n, d, ref_rows);
  nonzero_rows(out[0], n, d, out_rows);
  CHECK(out_rows == ref_rows);
  CHECK(grp.codecs[0]->union_rows() == int64_t(ref_rows.size()));
  const double e = relative_l2_error(out[0], ref);
  CHECK(e > 0.1);  // w = 640 buckets for ~1,700 non-zeros: collisions
  CHECK(e < 5);
  for (size_t r = 1; r < out.size(); ++r) CHECK(out[r] == out[0]);  // same on every rank
}

TEST_CASE("the r = 1 estimate is unbiased: its mean over many seeds is the exact average", "[s2]") {
  // P = 2, 1,024 non-zeros into w = 256 buckets (each estimate collides with
  // ~4 others). Over S seeds the mean error of element x is ~N(0, σ_x²/S);
  // its z-score must be small for every element and ~1 in mean square.
  const int64_t n = 64, d = 16;
  const int S = 3000;
  const sketch_hash hash = GENERATE(sketch_hash::rows, sketch_hash::elements);
  std::vector<std::vector<float>> g = {row_sparse_gradient(n, d, 0.5, 11),
                                       row_sparse_gradient(n, d, 0.5, 12)};
  for (auto& v : g[0]) v += v != 0 ? 1.0f : 0.0f;  // non-zero mean: a missing sign hash shows
  const auto ref = rank_order_average(g);
  std::vector<double> sum(ref.size(), 0), sum2(ref.size(), 0);
  for (int s = 0; s < S; ++s) {
    group grp(
        {.kind = codec_kind::s2, .sketch_width = 256, .hash = hash, .seed = uint64_t(s) * 7919}, 2);
    const auto out = grp.step(g, n, d);
    for (size_t i = 0; i < ref.size(); ++i) {
      const double e = double(out[0][i]) - double(ref[i]);
      sum[i] += e, sum2[i] += e * e;
    }
  }
  double max_z = 0, mean_z2 = 0;
  int counted = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double var = sum2[i] / S - (sum[i] / S) * (sum[i] / S);
    if (var <= 0) continue;  // outside the union: always exactly 0
    const double z = (sum[i] / S) / std::sqrt(var / S);
    max_z = std::max(max_z, std::abs(z));
    mean_z2 += z * z;
    ++counted;
  }
  mean_z2 /= counted;
  INFO("hash " << sketch_hash_name(hash) << " elements " << counted << " max |z| " << max_z
               << " mean z^2 " << mean_z2);
  CHECK(counted > 500);
  CHECK(max_z < 5.0);  // ~700 elements: max of |N(0,1)| is ~3.5
  CHECK(mean_z2 > 0.8);
  CHECK(mean_z2 < 1.25);
}

TEST_CASE("a median over more sketch rows lowers the error at the same total size", "[s2]") {
  const int64_t n = 500, d = 32;
  std::vector<std::vector<float>> g;
  for (int k = 0; k < 2; ++k) g.push_back(row_sparse_gradient(n, d, 0.05, 300 + k));
  const auto ref = rank_order_average(g);
  // r·w = 4 × nnz(U): with r = 1 every estimate meets ~0.25 collisions on
  // average; the median of 5 rows of w/5 discards outliers.
  double e1 = 0, e5 = 0;
  for (int s = 0; s < 20; ++s) {
    group one({.kind = codec_kind::s2, .sketch_ratio = 0.4, .seed = uint64_t(s)}, 2);
    group five({.kind = codec_kind::s2, .sketch_rows = 5, .sketch_ratio = 0.4, .seed = uint64_t(s)},
               2);
    e1 += relative_l2_error(one.step(g, n, d)[0], ref);
    e5 += relative_l2_error(five.step(g, n, d)[0], ref);
  }
  INFO("r=1 " << e1 / 20 << " r=5 " << e5 / 20);
  CHECK(e5 < e1);
}

TEST_CASE("contractive error feedback keeps the accumulated error bounded, plain diverges",
          "[s2]") {
  // The accumulated error A_T = Σ_t (exact average_t − applied_t) equals the
  // ranks' mean residual under contractive feedback (r = 1), so it must stay
  // bounded; plain feedback amplifies it by ~√ω each step when ω =
  // nnz(U)/w > 1 (here ω = 4).
  const int64_t n = 64, d = 16;
  const int P = 2, T = 150;
  auto accumulated = [&](error_feedback f) {
    group grp({.kind = codec_kind::s2, .sketch_width = 256, .feedback = f, .seed = 5}, P);
    std::vector<double> acc(size_t(n * d), 0);
    double g_norm = 0;
    for (int t = 0; t < T; ++t) {
      std::vector<std::vector<float>> g;
      for (int r = 0; r < P; ++r) g.push_back(row_sparse_gradient(n, d, 1.0, 1000 * t + r));
      const auto ref = rank_order_average(g);
      const auto out = grp.step(g, n, d);
      for (size_t i = 0; i < acc.size(); ++i) acc[i] += double(ref[i]) - double(out[0][i]);
      g_norm = 0;
      for (float v : ref) g_norm += double(v) * v;
    }
    double a = 0;
    for (double v : acc) a += v * v;
    return std::sqrt(a / g_norm);  // in units of one step's average gradient
  };
  const double contractive = accumulated(error_feedback::contractive);
  const double plain = accumulated(error_feedback::plain);
  const double off = accumulated(error_feedback::off);
  INFO("|A_T| / |G|: contractive " << contractive << " plain " << plain << " off " << off);
  CHECK(contractive < 10);   // bounded: ~√ω·(1+ω)/... a few gradients
  CHECK(!(plain < 1e6));     // grows geometrically (or overflows to inf/NaN)
  CHECK(off > contractive);  // without feedback the noise adds up as a random walk
}

TEST_CASE("an S2 codec with error feedback refuses a step of another shape, naming both", "[s2]") {
  group grp({.kind = codec_kind::s2, .sketch_ratio = 0.1, .feedback = error_feedback::contractive},
            2);
  grp.step({row_sparse_gradient(50, 8, 0.5, 1), row_sparse_gradient(50, 8, 0.5, 2)}, 50, 8);
  CHECK_THROWS_WITH(
      grp.step({row_sparse_gradient(40, 10, 0.5, 1), row_sparse_gradient(40, 10, 0.5, 2)}, 40, 10),
      Catch::Contains("holds a gradient of n=50 d=8, this step has n=40 d=10"));
}

TEST_CASE("divide_floats gives the bits of a division by P, in place or not", "[codec]") {
  std::vector<float> x = {1.0f, -3.0f, 1e-38f, 1.4e-45f, 3e38f, 0.1f, -0.0f, 7.0f / 3.0f};
  for (int i = 0; i < 1000; ++i) x.push_back(float(i) * 0.37f - 100.0f);
  for (float p : {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 8.0f, 64.0f}) {
    std::vector<float> out(x.size()), in_place = x;
    divide_floats(out.data(), x.data(), x.size(), p);
    divide_floats(in_place.data(), in_place.data(), x.size(), p);
    for (size_t i = 0; i < x.size(); ++i) {
      const float ref = x[i] / p;
      INFO("p=" << p << " x=" << x[i]);
      REQUIRE(std::memcmp(&out[i], &ref, 4) == 0);
      REQUIRE(std::memcmp(&in_place[i], &ref, 4) == 0);
    }
  }
}
