#include <catch2/catch.hpp>

#include <algorithm>

#include "core/error.hpp"
#include "model/gpt.hpp"
#include "partition/routing.hpp"
#include "partition/stages.hpp"

using namespace merak;
using namespace merak::partition;

namespace {

model::gpt_config tiny(bool tied) {
  model::gpt_config c;
  c.vocab = 32;
  c.max_seq = 8;
  c.layers = 3;
  c.dim = 16;
  c.heads = 2;
  c.tied_head = tied;
  return c;
}

}  // namespace

TEST_CASE("routing: every output reaches its readers and every reader names its producer",
          "[routing]") {
  auto g = model::build_model(tiny(true));
  for (int pp : {1, 2, 3, 4}) {
    auto bounds = balanced_stages(g, pp);
    auto r = route(g, bounds);
    REQUIRE(int(r.size()) == pp);
    for (int s = 0; s < pp; ++s) {
      auto [ins, outs] = g.boundary(bounds[size_t(s)], bounds[size_t(s) + 1]);
      REQUIRE(r[size_t(s)].input_producer.size() == ins.size());
      REQUIRE(r[size_t(s)].output_readers.size() == outs.size());
      for (size_t k = 0; k < outs.size(); ++k) {
        const auto& readers = r[size_t(s)].output_readers[k];
        CHECK(!readers.empty());
        for (int q : readers) {
          CHECK(q > s);
          // The reader lists this output as an input produced by s.
          auto [qins, qouts] = g.boundary(bounds[size_t(q)], bounds[size_t(q) + 1]);
          auto it = std::find(qins.begin(), qins.end(), outs[k]);
          REQUIRE(it != qins.end());
          CHECK(r[size_t(q)].input_producer[size_t(it - qins.begin())] == s);
        }
      }
      for (size_t k = 0; k < ins.size(); ++k) CHECK(r[size_t(s)].input_producer[k] < s);
    }
    // The graph inputs: tokens where the embeddings are, targets at the loss.
    const int tokens = g.find_value("tokens"), targets = g.find_value("targets");
    auto reads = [&](int s, int v) {
      auto& gi = r[size_t(s)].graph_inputs;
      return std::find(gi.begin(), gi.end(), v) != gi.end();
    };
    CHECK(reads(0, tokens));
    CHECK(reads(pp - 1, targets));
    for (int s = 1; s + 1 < pp; ++s) CHECK(r[size_t(s)].graph_inputs.empty());
  }
}

TEST_CASE("routing: the tied embedding is owned by the first stage and held by the last",
          "[routing]") {
  auto g = model::build_model(tiny(true));
  auto r = route(g, balanced_stages(g, 3));
  REQUIRE(r[0].ties.size() == 1);
  CHECK(r[0].ties[0] == tied_param{"wte", 0, {0, 2}});
  CHECK(r[1].ties.empty());
  REQUIRE(r[2].ties.size() == 1);
  CHECK(r[2].ties[0] == r[0].ties[0]);
  // One stage holds both uses: nothing to settle.
  CHECK(route(g, balanced_stages(g, 1))[0].ties.empty());
  // An untied head shares nothing.
  auto u = model::build_model(tiny(false));
  for (auto& s : route(u, balanced_stages(u, 3))) CHECK(s.ties.empty());
}

TEST_CASE("routing: bounds that do not cut the graph are refused", "[routing]") {
  auto g = model::build_model(tiny(true));
  const int n = int(g.nodes().size());
  CHECK_THROWS_AS(route(g, {0, 3, 3, n}), error);
  CHECK_THROWS_AS(route(g, {0, n - 1}), error);
  CHECK_THROWS_AS(route(g, {1, n}), error);
  CHECK_THROWS_AS(route(g, {0}), error);
}
