// The codecs as pure encode / reduce / decode steps, without a transport.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <vector>

#include "codec_test_util.hpp"
#include "comm/codec.hpp"
#include "comm/row_sparse.hpp"

using namespace merak;
using namespace merak::comm;
using merak::comm::testing::rank_order_average;
using merak::comm::testing::row_sparse_gradient;

namespace {

// Runs one step of `config` on copies of grads; returns every rank's result.
std::vector<std::vector<float>> run_pure(const codec_config& config,
                                         std::vector<std::vector<float>> grads, int64_t n,
                                         int64_t d, std::vector<int64_t>* union_rows = nullptr) {
  std::vector<std::unique_ptr<codec>> owned;
  std::vector<codec*> codecs;
  std::vector<std::span<float>> spans;
  for (auto& g : grads) {
    owned.push_back(make_codec(config));
    codecs.push_back(owned.back().get());
    spans.emplace_back(g);
  }
  run_codecs(codecs, spans, n, d);
  if (union_rows)
    for (auto* c : codecs) union_rows->push_back(c->union_rows());
  return grads;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("the row scan finds exactly the rows that hold a value other than zero", "[codec]") {
  const int64_t n = 7, d = 33;
  std::vector<float> g(size_t(n * d), 0.0f);
  g[1 * d + 32] = 1e-30f;                                  // last column, tiny
  g[3 * d + 0] = -0.0f;                                    // negative zero is zero
  g[4 * d + 5] = std::numeric_limits<float>::quiet_NaN();  // NaN is not zero
  g[6 * d + 17] = -2.0f;
  std::vector<uint32_t> rows;
  nonzero_rows(g, n, d, rows);
  CHECK(rows == std::vector<uint32_t>{1, 4, 6});
}

TEST_CASE("the OR of the ranks' bitmaps is the union of their non-zero rows", "[codec]") {
  const int64_t n = 1000, d = 3;
  std::set<uint32_t> expect;
  std::vector<uint64_t> acc(size_t(bitmap_words(n)), 0), bits;
  for (int r = 0; r < 3; ++r) {
    auto g = row_sparse_gradient(n, d, 0.05, 100 + r);
    std::vector<uint32_t> rows;
    nonzero_rows(g, n, d, rows);
    expect.insert(rows.begin(), rows.end());
    rows_to_bitmap(rows, n, bits);
    REQUIRE(bits.size() == 16);
    for (size_t i = 0; i < bits.size(); ++i) acc[i] |= bits[i];
  }
  std::vector<uint32_t> got;
  bitmap_to_rows(acc, got);
  CHECK(got == std::vector<uint32_t>(expect.begin(), expect.end()));
  CHECK(acc.back() >> (1000 % 64) == 0);  // no bits past n
}

TEST_CASE("exact codecs equal the rank-order average bit for bit", "[codec]") {
  const int64_t n = 300, d = 40;
  for (codec_kind kind : {codec_kind::dense, codec_kind::coo, codec_kind::union_rows}) {
    for (int P = 1; P <= 4; ++P) {
      std::vector<std::vector<float>> g;
      for (int r = 0; r < P; ++r) g.push_back(row_sparse_gradient(n, d, 0.1, 7 * P + r));
      const auto ref = rank_order_average(g);
      std::vector<int64_t> unions;
      const auto out = run_pure({.kind = kind}, g, n, d, &unions);
      std::set<uint32_t> u;
      for (auto& gr : g) {
        std::vector<uint32_t> rows;
        nonzero_rows(gr, n, d, rows);
        u.insert(rows.begin(), rows.end());
      }
      INFO(codec_kind_name(kind) << " P=" << P);
      for (int r = 0; r < P; ++r) {
        CHECK(bitwise_equal(out[size_t(r)], ref));
        CHECK(unions[size_t(r)] == (kind == codec_kind::dense ? n : int64_t(u.size())));
      }
    }
  }
}

TEST_CASE("every codec returns zeros when no rank has a non-zero row", "[codec]") {
  const int64_t n = 50, d = 8;
  for (codec_kind kind :
       {codec_kind::dense, codec_kind::coo, codec_kind::union_rows, codec_kind::s2}) {
    std::vector<std::vector<float>> g(3, std::vector<float>(size_t(n * d), 0.0f));
    const auto out = run_pure({.kind = kind, .sketch_ratio = 0.1}, g, n, d);
    for (auto& o : out) CHECK(o == std::vector<float>(size_t(n * d), 0.0f));
  }
}

TEST_CASE("codecs reject a gradient whose size is not n times d, naming n and d", "[codec]") {
  std::vector<float> g(100);
  codec_message msg;
  for (codec_kind kind :
       {codec_kind::dense, codec_kind::coo, codec_kind::union_rows, codec_kind::s2}) {
    auto c = make_codec({.kind = kind});
    CHECK_THROWS_WITH(c->encode(g, 10, 11, 2, msg),
                      Catch::Contains("n=10 d=11") && Catch::Contains("100 floats"));
    CHECK_THROWS_WITH(c->encode(g, 0, 100, 2, msg), Catch::Contains("n=0 d=100"));
  }
}

TEST_CASE("the pure reduction names the rank whose message has another shape", "[codec]") {
  std::vector<float> a(12), b(13);
  codec_message ma, mb;
  ma.sum = a, mb.sum = b;
  codec_message* msgs[] = {&ma, &mb};
  CHECK_THROWS_WITH(reduce_messages(msgs),
                    Catch::Contains("rank 1 sends 0 bitmap words, 13 floats"));
}

TEST_CASE("codec names and bad configurations give errors that name the value", "[codec]") {
  CHECK(parse_codec_kind("union") == codec_kind::union_rows);
  CHECK(codec_kind_name(parse_codec_kind("s2")) == "s2");
  CHECK_THROWS_WITH(parse_codec_kind("topk"), Catch::Contains("'topk'"));
  CHECK(parse_error_feedback("on") == error_feedback::contractive);
  CHECK_THROWS_WITH(parse_error_feedback("yes"), Catch::Contains("'yes'"));
  CHECK_THROWS_WITH(make_codec({.kind = codec_kind::s2, .sketch_rows = 0}), Catch::Contains("r=0"));
  CHECK_THROWS_WITH(make_codec({.kind = codec_kind::s2, .sketch_ratio = -1}),
                    Catch::Contains("ratio -1"));
}

TEST_CASE("known non-zero rows replace the scan and give the same result", "[codec]") {
  const int64_t n = 400, d = 16;
  for (codec_kind kind : {codec_kind::coo, codec_kind::union_rows, codec_kind::s2}) {
    const codec_config config{.kind = kind, .sketch_ratio = 0.3, .feedback = error_feedback::off};
    std::vector<std::vector<float>> g;
    for (int r = 0; r < 3; ++r) g.push_back(row_sparse_gradient(n, d, 0.1, 60 + r));
    const auto scanned = run_pure(config, g, n, d);
    // Known rows: the non-zero ones plus some zero rows (allowed).
    std::vector<std::unique_ptr<codec>> owned;
    std::vector<codec*> codecs;
    std::vector<std::span<float>> spans;
    for (auto& gr : g) {
      std::vector<uint32_t> rows;
      nonzero_rows(gr, n, d, rows);
      rows.push_back(uint32_t(n - 1));
      if (rows.size() > 1 && rows[rows.size() - 2] == n - 1) rows.pop_back();
      owned.push_back(make_codec(config));
      owned.back()->set_known_rows(rows);
      codecs.push_back(owned.back().get());
      spans.emplace_back(gr);
    }
    run_codecs(codecs, spans, n, d);
    INFO(codec_kind_name(kind));
    // S2 decodes every row of the union: the zero row n-1 gets collision
    // noise there, the other rows must not change.
    const size_t compared = kind == codec_kind::s2 ? size_t((n - 1) * d) : size_t(n * d);
    for (size_t r = 0; r < g.size(); ++r)
      CHECK(std::memcmp(g[r].data(), scanned[r].data(), compared * sizeof(float)) == 0);
    CHECK(codecs[0]->union_rows() >= 1);
  }
}

TEST_CASE("known rows that are out of range or not increasing are refused by position", "[codec]") {
  std::vector<float> g(40, 1.0f);
  codec_message msg;
  auto c = make_codec({.kind = codec_kind::union_rows});
  const uint32_t unsorted[] = {1, 3, 2};
  c->set_known_rows(unsorted);
  CHECK_THROWS_WITH(c->encode(g, 10, 4, 2, msg),
                    Catch::Contains("known row 2 at position 2 is not increasing"));
  const uint32_t beyond[] = {1, 10};
  c->set_known_rows(beyond);
  CHECK_THROWS_WITH(
      c->encode(g, 10, 4, 2, msg),
      Catch::Contains("known row 10 at position 1 is out of range") && Catch::Contains("n=10"));
}
