// reduce_rows: every codec over the in-process transport, one thread per
// rank, against its pure run and the spec's traffic formulas.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "codec_test_util.hpp"
#include "comm/codec.hpp"
#include "bench/codec_bench.hpp"
#include "comm/row_sparse.hpp"
#include "comm/s2.hpp"
#include "comm_test_util.hpp"
#include "rank_values.hpp"

using namespace merak;
using namespace merak::comm;
using namespace merak::bench;
using merak::comm::testing::doubling_bytes;
using merak::comm::testing::row_sparse_gradient;
using merak::comm::testing::run_ranks;

namespace {

const codec_kind all_kinds[] = {codec_kind::dense, codec_kind::coo, codec_kind::union_rows,
                                codec_kind::s2};

struct driven {
  std::vector<std::vector<float>> out;
  std::vector<codec_stats> stats;
};

// `steps` steps of `config` over an in-process group of P; rank r reduces
// grads[step][r].
driven drive(const codec_config& config, const std::vector<std::vector<std::vector<float>>>& grads,
             int64_t n, int64_t d) {
  const int P = int(grads[0].size());
  driven res{std::vector<std::vector<float>>(size_t(P)), std::vector<codec_stats>(size_t(P))};
  auto errors = run_ranks(P, [&](transport& t) {
    auto c = make_codec(config);
    for (size_t s = 0; s < grads.size(); ++s) {
      auto g = grads[s][size_t(t.rank())];
      reduce_rows(*c, t, g, n, d, 100, &res.stats[size_t(t.rank())]);
      res.out[size_t(t.rank())] = std::move(g);
    }
  });
  for (int r = 0; r < P; ++r) REQUIRE(errors[size_t(r)] == "");
  return res;
}

std::vector<std::vector<float>> pure(const codec_config& config,
                                     const std::vector<std::vector<std::vector<float>>>& grads,
                                     int64_t n, int64_t d) {
  const size_t P = grads[0].size();
  std::vector<std::unique_ptr<codec>> owned;
  std::vector<codec*> codecs;
  for (size_t r = 0; r < P; ++r) {
    owned.push_back(make_codec(config));
    codecs.push_back(owned.back().get());
  }
  std::vector<std::vector<float>> g;
  for (const auto& step : grads) {
    g = step;
    std::vector<std::span<float>> spans(g.begin(), g.end());
    run_codecs(codecs, spans, n, d);
  }
  return g;
}

}  // namespace

TEST_CASE("every codec over the in-process transport equals its pure run, P = 2..4",
          "[codec][driver]") {
  // Dyadic values: every sum is exact, so the ring's order of summation
  // cannot matter and the results must be identical. Three steps, so that
  // S2's per-step seed and error feedback are exercised too (feedback within
  // float tolerance).
  const int64_t n = 500, d = 24;
  for (int P = 2; P <= 4; ++P)
    for (codec_kind kind : all_kinds)
      for (error_feedback f : {error_feedback::off, error_feedback::contractive}) {
        if (f != error_feedback::off && kind != codec_kind::s2) continue;
        const codec_config config{
            .kind = kind, .sketch_rows = 3, .sketch_ratio = 0.2, .feedback = f, .seed = 9};
        std::vector<std::vector<std::vector<float>>> grads(3);
        for (int s = 0; s < 3; ++s)
          for (int r = 0; r < P; ++r)
            grads[size_t(s)].push_back(row_sparse_gradient(n, d, 0.04, 50 * s + r, true));
        const auto ref = pure(config, grads, n, d);
        const auto got = drive(config, grads, n, d);
        INFO(codec_kind_name(kind) << " P=" << P << " feedback " << error_feedback_name(f));
        for (int r = 0; r < P; ++r) {
          if (f == error_feedback::off) {
            CHECK(std::memcmp(got.out[size_t(r)].data(), ref[size_t(r)].data(), n * d * 4) == 0);
            continue;
          }
          // Feedback scales by 1/(1+ω): later steps are no longer dyadic, and
          // the ring sums in another order than the pure reduction.
          double worst = 0, mag = 0;
          for (size_t i = 0; i < ref[size_t(r)].size(); ++i) {
            worst = std::max(worst, double(std::abs(got.out[size_t(r)][i] - ref[size_t(r)][i])));
            mag = std::max(mag, double(std::abs(ref[size_t(r)][i])));
          }
          CHECK(mag > 0.1);
          CHECK(worst <= 1e-5 * mag);
        }
      }
}

TEST_CASE("bytes sent per rank match the spec's traffic formulas", "[codec][driver]") {
  // Formulas (b = 4): dense 2(P-1)/P·n·d·b; coo (P-1)·(rows sent)·(4 + d·b)
  // summed over ranks; union 2(P-1)/P·(n/8 + |U|·d·b); s2 2(P-1)/P·(n/8 +
  // r·w·b). The driver adds (P-1)·72 bytes of shape header; a ring splits a
  // buffer into P segments that differ by one element (8 bytes for bitmap
  // words), and allgatherv exchanges (P-1)·8 bytes of sizes. All-reduces of
  // at most ring_options::doubling_max_bytes go by recursive doubling instead
  // (here the union's and S2's; exact, but not equal on every rank at P = 3).
  const int64_t n = 5000, d = 64;
  const size_t doubling_max = ring_options{}.doubling_max_bytes;
  for (int P : {2, 3, 4}) {
    std::vector<std::vector<std::vector<float>>> grads(1);
    int64_t nnz_rows = 0;
    std::vector<uint32_t> rows;
    std::vector<uint64_t> acc(size_t(bitmap_words(n)), 0), bits;
    for (int r = 0; r < P; ++r) {
      grads[0].push_back(row_sparse_gradient(n, d, 0.02, 77 + r));
      nonzero_rows(grads[0].back(), n, d, rows);
      nnz_rows += int64_t(rows.size());
      rows_to_bitmap(rows, n, bits);
      for (size_t i = 0; i < bits.size(); ++i) acc[i] |= bits[i];
    }
    bitmap_to_rows(acc, rows);
    const double U = double(rows.size()), ring = 2.0 * (P - 1) / P;
    const double header = (P - 1) * 72.0, bitmap = double(bitmap_words(n)) * 8;
    // Rank r's bytes for an all-reduce of `bytes`, and whether it is exact.
    auto allreduce = [&](int r, double bytes) {
      return bytes <= double(doubling_max) ? double(doubling_bytes(P, r, uint64_t(bytes)))
                                           : ring * bytes;
    };
    for (codec_kind kind : all_kinds) {
      const codec_config config{.kind = kind, .sketch_ratio = 0.05};
      const auto got = drive(config, grads, n, d);
      const double slack = 2.0 * (P - 1) * 8;  // ring rounding, per rank
      if (kind == codec_kind::coo) {
        double total = 0;
        for (auto& s : got.stats) total += double(s.bytes_sent);
        const double expect_total =
            (P - 1) * double(nnz_rows) * (4 + d * 4) + P * (P - 1) * 8.0 + P * header;
        INFO("coo P=" << P << " bytes " << total << " formula " << expect_total);
        CHECK(std::abs(total - expect_total) <= slack * P);
      } else {
        for (int r = 0; r < P; ++r) {
          double expect = header;
          switch (kind) {
            case codec_kind::dense:
              expect += allreduce(r, double(n * d * 4));
              break;
            case codec_kind::union_rows:  // two all-reduces: bitmap, then the union's rows
              expect += allreduce(r, bitmap) + allreduce(r, U * d * 4);
              break;
            case codec_kind::s2:  // one all-reduce of bitmap and table
              expect += allreduce(r, bitmap + double(s2_sketch_width(config, n, d)) * 4);
              break;
            default:
              break;
          }
          const double sent = double(got.stats[size_t(r)].bytes_sent);
          INFO(codec_kind_name(kind)
               << " P=" << P << " rank " << r << " bytes " << sent << " formula " << expect);
          CHECK(std::abs(sent - expect) <= slack);
        }
      }
      for (auto& s : got.stats) CHECK(s.union_rows == (kind == codec_kind::dense ? n : int64_t(U)));
    }
  }
}

TEST_CASE("a rank with another shape makes every rank fail, naming n, d and the peer",
          "[codec][driver]") {
  const int64_t n = 100;
  auto errors = run_ranks(3, [&](transport& t) {
    const int64_t d = t.rank() == 2 ? 16 : 8;
    auto g = row_sparse_gradient(n, d, 0.1, 3);
    auto c = make_codec({.kind = codec_kind::s2});
    reduce_rows(*c, t, g, n, d, 5);
  });
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r << ": " << errors[size_t(r)]);
    CHECK_THAT(errors[size_t(r)], Catch::Contains("n=100 d=") && Catch::Contains("peer rank"));
  }
  CHECK_THAT(errors[0], Catch::Contains("peer rank 2 reduces codec s2 n=100 d=16"));
  CHECK_THAT(errors[2], Catch::Contains("peer rank 0 reduces codec s2 n=100 d=8"));
}

TEST_CASE("a rank whose gradient does not hold n*d floats fails, and its peers name it at once",
          "[codec][driver]") {
  const auto t0 = std::chrono::steady_clock::now();
  auto errors = run_ranks(3, [&](transport& t) {
    auto g = row_sparse_gradient(100, 8, 0.1, 3);
    if (t.rank() == 1) g.pop_back();
    auto c = make_codec({.kind = codec_kind::union_rows});
    reduce_rows(*c, t, g, 100, 8, 5);
  });
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));  // no timeout
  CHECK_THAT(errors[1], Catch::Contains("rank 1: gradient holds 799 floats, but n=100 d=8"));
  CHECK_THAT(errors[0], Catch::Contains("peer rank 1 reduces codec union n=100 d=8 (799 floats)"));
  CHECK_THAT(errors[2], Catch::Contains("peer rank 1 reduces codec union n=100 d=8 (799 floats)"));
}

TEST_CASE("ranks out of step or on different codecs fail instead of mixing results",
          "[codec][driver]") {
  auto errors = run_ranks(2, [&](transport& t) {
    auto g = row_sparse_gradient(64, 8, 0.2, 4);
    auto c = make_codec({.kind = t.rank() ? codec_kind::union_rows : codec_kind::coo});
    reduce_rows(*c, t, g, 64, 8, 5);
  });
  CHECK_THAT(errors[0], Catch::Contains("peer rank 1 reduces codec union"));
  CHECK_THAT(errors[1], Catch::Contains("peer rank 0 reduces codec coo"));
}

TEST_CASE("S2 ranks with different sketch hashes fail, naming the hash", "[codec][driver]") {
  auto errors = run_ranks(2, [&](transport& t) {
    auto g = row_sparse_gradient(64, 8, 0.2, 4);
    auto c = make_codec(
        {.kind = codec_kind::s2, .hash = t.rank() ? sketch_hash::elements : sketch_hash::rows});
    reduce_rows(*c, t, g, 64, 8, 5);
  });
  CHECK_THAT(errors[0], Catch::Contains("peer rank 1 reduces codec s2") &&
                            Catch::Contains("hash=elements") && Catch::Contains("hash=rows"));
  CHECK_THAT(errors[1],
             Catch::Contains("peer rank 0 reduces codec s2") && Catch::Contains("hash=rows"));
}

TEST_CASE("a group of one leaves the gradient as it is and sends nothing", "[codec][driver]") {
  for (codec_kind kind : all_kinds) {
    auto errors = run_ranks(1, [&](transport& t) {
      const auto g0 = row_sparse_gradient(64, 8, 0.2, 4);
      auto g = g0;
      auto c = make_codec({.kind = kind});
      codec_stats st;
      reduce_rows(*c, t, g, 64, 8, 5, &st);
      CHECK(g == g0);
      CHECK(st.bytes_sent == 0);
    });
    CHECK(errors[0] == "");
  }
}

TEST_CASE("the codec benchmark over a transport reports the counted bytes and a small exact error",
          "[codec][driver]") {
  auto errors = run_ranks(2, [&](transport& t) {
    for (codec_kind kind : all_kinds) {
      const auto r = bench_codec_over(t, {.config = {.kind = kind, .sketch_ratio = 0.1},
                                          .n = 2000,
                                          .d = 32,
                                          .density = 0.05,
                                          .iters = 2,
                                          .known_rows = kind == codec_kind::union_rows,
                                          .tag = 300});
      CHECK(r.ranks == 2);
      CHECK(r.bytes_per_rank > 0);
      CHECK(r.time_ms >= r.time_min_ms);
      if (kind != codec_kind::dense) CHECK(r.union_rows > r.own_rows);
      if (kind == codec_kind::s2) {
        CHECK(r.rel_error > 0.05);  // a sketch of 10% of n·d over a ~10% union is noisy
        CHECK(r.bytes_per_rank < 0.2 * r.dense_bytes_per_rank);
      } else {
        CHECK(r.rel_error < 1e-6);
      }
      CHECK_THAT(r.to_json(),
                 Catch::Contains("\"method\":\"" + std::string(codec_kind_name(kind)) + "\""));
    }
  });
  CHECK(errors[0] == "");
  CHECK(errors[1] == "");
}

TEST_CASE("the pure codec benchmark gives one result per method and sketch ratio",
          "[codec][bench]") {
  codec_bench_options o;
  o.n = 3000, o.d = 16, o.iters = 2, o.ranks = 3, o.densities = {0.02};
  o.sketch_ratios = {0.05, 0.5};
  const auto rs = bench_codecs_pure(o);
  REQUIRE(rs.size() == 5);
  CHECK(rs[0].method == "dense");
  CHECK(rs[0].bytes_per_rank == rs[0].dense_bytes_per_rank);
  CHECK(rs[3].sketch_ratio == Approx(0.05));
  CHECK(rs[4].rel_error < rs[3].rel_error);  // a wider sketch is more accurate
  for (int i = 0; i < 3; ++i) CHECK(rs[size_t(i)].rel_error < 1e-6);
}

// Not run by default: `merak_comm_tests "[.codec_bench]" -s` prints the JSON
// lines of the pure benchmark at the sizes.
TEST_CASE("codec benchmark at n = 50,000, d = 256", "[.codec_bench]") {
  for (bool known : {false, true}) {
    codec_bench_options o;
    o.known_rows = known;
    for (const auto& r : bench_codecs_pure(o)) std::printf("%s\n", r.to_json().c_str());
  }
}

// Not run by default: `merak_comm_tests "[.codec_bench_inproc]" -s` prints
// end-to-end times over the in-process transport (P = 2 threads).
TEST_CASE("codec benchmark over the in-process transport at n = 50,000, d = 256",
          "[.codec_bench_inproc]") {
  for (double density : {0.01, 0.05}) {
    std::vector<codec_config> configs = {
        {.kind = codec_kind::dense}, {.kind = codec_kind::coo}, {.kind = codec_kind::union_rows}};
    for (double y : {0.01, 0.05, 0.1, 0.2})
      configs.push_back({.kind = codec_kind::s2, .sketch_ratio = y, .seed = 1});
    for (const auto& config : configs)
      for (bool known : {false, true}) {
        if (known && config.kind == codec_kind::dense) continue;
        codec_bench_result r0;
        auto errors = run_ranks(2, [&](transport& t) {
          auto r = bench_codec_over(
              t, {.config = config, .density = density, .iters = 7, .known_rows = known});
          if (t.rank() == 0) r0 = r;
        });
        REQUIRE(errors[0] == "");
        std::printf("%s\n", r0.to_json().c_str());
      }
  }
}
