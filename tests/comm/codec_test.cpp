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

TEST_CASE("the row scan agrees with a value-by-value check in the vector blocks and the tail",
          "[codec]") {
  // Widths below, at and past the scan's 64-value blocks; one value per row
  // at every column in turn, and rows of -0, NaN and denormals.
  for (int64_t d : {1, 15, 63, 64, 65, 128, 133, 256, 257}) {
    const int64_t n = 3 * d + 4;
    std::vector<float> g(size_t(n * d), 0.0f);
    for (int64_t c = 0; c < d; ++c) {
      g[size_t((3 * c) * d + c)] = 1e-42f;     // denormal: non-zero
      g[size_t((3 * c + 1) * d + c)] = -0.0f;  // zero
      g[size_t((3 * c + 2) * d + c)] = c % 2 ? -3.0f : std::numeric_limits<float>::quiet_NaN();
    }
    for (int64_t c = 0; c < d; ++c) g[size_t((n - 1) * d + c)] = -0.0f;  // a row of -0
    std::vector<uint32_t> expect, rows;
    for (int64_t k = 0; k < n; ++k) {
      bool any = false;
      for (int64_t c = 0; c < d; ++c) any |= !(g[size_t(k * d + c)] == 0.0f);
      if (any) expect.push_back(uint32_t(k));
    }
    nonzero_rows(g, n, d, rows);
    CHECK(rows == expect);
    CHECK(rows.size() == size_t(2 * d));
  }
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

TEST_CASE("coo sums each union row in rank order from +0 on its own rows, keeping signed zeros",
          "[codec]") {
  // Rows with some -0 values, ranks whose zero rows hold -0: the decode must
  // give the bits of "zero this rank's rows, add every rank's rows in rank
  // order, divide the union rows by P", whatever the sign of the zeros.
  const int64_t n = 40, d = 70;
  for (int P = 1; P <= 4; ++P) {
    std::vector<std::vector<float>> g;
    for (int r = 0; r < P; ++r) {
      auto gr = row_sparse_gradient(n, d, 0.3, 900 + 10 * P + r);
      for (int64_t k = 0; k < n; ++k)
        for (int64_t c = (k + r) % 3; c < d; c += 3) {
          float& v = gr[size_t(k * d + c)];
          v = v == 0.0f ? -0.0f : (c % 2 ? -0.0f : v);  // -0 in zero rows and non-zero ones
        }
      g.push_back(gr);
    }
    std::vector<std::vector<uint32_t>> rows(static_cast<size_t>(P));
    std::set<uint32_t> u;
    for (int r = 0; r < P; ++r) {
      nonzero_rows(g[size_t(r)], n, d, rows[size_t(r)]);
      u.insert(rows[size_t(r)].begin(), rows[size_t(r)].end());
    }
    std::vector<std::vector<float>> expect;
    for (int me = 0; me < P; ++me) {
      std::vector<float> e = g[size_t(me)];
      for (uint32_t k : rows[size_t(me)])
        for (int64_t c = 0; c < d; ++c) e[size_t(k * d + c)] = 0.0f;
      for (int r = 0; r < P; ++r)
        for (uint32_t k : rows[size_t(r)])
          for (int64_t c = 0; c < d; ++c) e[size_t(k * d + c)] += g[size_t(r)][size_t(k * d + c)];
      for (uint32_t k : u)
        for (int64_t c = 0; c < d; ++c) e[size_t(k * d + c)] /= float(P);
      expect.push_back(e);
    }
    std::vector<int64_t> unions;
    const auto out = run_pure({.kind = codec_kind::coo}, g, n, d, &unions);
    INFO("P=" << P);
    for (int r = 0; r < P; ++r) {
      CHECK(bitwise_equal(out[size_t(r)], expect[size_t(r)]));
      CHECK(unions[size_t(r)] == int64_t(u.size()));
    }
  }
}

TEST_CASE("coo refuses a block whose rows do not increase, naming the rank", "[codec]") {
  const int64_t n = 10, d = 2;
  std::vector<float> g(size_t(n * d), 0.0f);
  g[2 * d] = 1.0f;
  auto c = make_codec({.kind = codec_kind::coo});
  codec_message msg;
  c->encode(g, n, d, 2, msg);
  // Rank 0 sends rows 5 then 3; rank 1 (this one) its row 2.
  std::vector<std::byte> blocks(4 * 3 * 3);
  const uint32_t bad[2] = {5, 3}, mine = 2;
  std::memcpy(blocks.data(), bad, 8);
  std::memcpy(blocks.data() + 24, &mine, 4);
  msg.gathered = blocks;
  msg.gathered_sizes = {24, 12};
  CHECK_THROWS_WITH(c->decode(msg, g), Catch::Contains("rank 0 sent rows out of order"));
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
