#include <catch2/catch.hpp>

#include <map>

#include "model/grad_buckets.hpp"
#include "core/error.hpp"
#include "model/gpt.hpp"

using namespace merak;
using namespace merak::model;

namespace {

// Every parameter exactly once over the step's buckets.
void check_each_once(const std::vector<grad_bucket>& all, size_t params) {
  std::map<int, int> seen;
  for (auto& b : all)
    for (int p : b.params) ++seen[p];
  CHECK(seen.size() == params);
  for (auto& [p, n] : seen) CHECK(n == 1);
}

}  // namespace

TEST_CASE("grad buckets fill in backward order and leave at the byte limit", "[buckets]") {
  // Nodes 0..3 in forward order; node 3 finishes first in backward.
  grad_bucketer b({100, 100, 100, 100, 50}, {{0}, {1}, {2, 4}, {3}}, -1, 200);
  std::vector<grad_bucket> all;
  auto take = [&](std::vector<grad_bucket> x) {
    all.insert(all.end(), x.begin(), x.end());
    return x;
  };
  CHECK(take(b.node_finished(3)).empty());  // 100 bytes open
  auto at2 = take(b.node_finished(2));      // 3 (100) + 2 (100) reaches 200
  REQUIRE(at2.size() == 1);
  CHECK(at2[0].params == std::vector<int>{3, 2});
  CHECK_FALSE(at2[0].sparse);
  CHECK(take(b.node_finished(1)).empty());  // 4 (50) + 1 (100)
  auto rest = take(b.finish());             // 0 tops it up to 250
  REQUIRE(rest.size() == 1);
  CHECK(rest[0].params == std::vector<int>{4, 1, 0});
  CHECK(b.buckets_this_step() == 2);
  check_each_once(all, 5);
  // A new step starts empty and makes the same buckets.
  b.begin_step();
  CHECK(b.node_finished(3).empty());
  CHECK(b.node_finished(2)[0].params == std::vector<int>{3, 2});
}

TEST_CASE("the sparse parameter leaves alone as soon as it is final", "[buckets]") {
  grad_bucketer b({10, 1000, 10}, {{1, 0}, {2}}, 1, 1 << 20);
  auto at1 = b.node_finished(1);
  CHECK(at1.empty());
  auto at0 = b.node_finished(0);
  REQUIRE(at0.size() == 1);
  CHECK(at0[0].sparse);
  CHECK(at0[0].params == std::vector<int>{1});
  auto rest = b.finish();
  REQUIRE(rest.size() == 1);
  CHECK_FALSE(rest[0].sparse);
  CHECK(rest[0].params == std::vector<int>{2, 0});
}

TEST_CASE("a parameter marked alone leaves in a dense bucket of its own", "[buckets]") {
  grad_bucketer b({10, 1000, 10, 10}, {{1, 0}, {2, 3}}, -1, 1 << 20, {2});
  auto at1 = b.node_finished(1);  // 2 alone at once; 3 stays open
  REQUIRE(at1.size() == 1);
  CHECK(at1[0].params == std::vector<int>{2});
  CHECK_FALSE(at1[0].sparse);
  auto rest = b.finish();
  REQUIRE(rest.size() == 1);
  CHECK(rest[0].params == std::vector<int>{3, 1, 0});
  CHECK_THROWS_AS(grad_bucketer({4}, {{0}}, -1, 8, {1}), error);
}

TEST_CASE("finish without node hooks still buckets everything, and a parameter no node uses throws",
          "[buckets]") {
  grad_bucketer b({4, 4, 4}, {{0}, {1, 2}}, -1, 8);
  auto all = b.finish();
  check_each_once(all, 3);
  CHECK(all.front().params == std::vector<int>{1, 2});
  grad_bucketer orphan({4, 4}, {{0}}, -1, 8);
  CHECK_THROWS_AS(orphan.finish(), error);
  CHECK_THROWS_AS(grad_bucketer({4}, {{1}}, -1, 8), error);
}

TEST_CASE("a tied embedding's gradient is final only after its first user", "[buckets]") {
  model::gpt_config c;
  c.vocab = 32, c.max_seq = 8, c.layers = 1, c.dim = 16, c.heads = 2;
  auto g = model::build_model(c);
  const int n = int(g.nodes().size());
  auto fa = gradients_final_after(g, 0, n, {"wte", "wpe"});
  // Both embeddings are used first by the first nodes, not by the LM head
  // (the last node), which also reads wte.
  int wte_node = -1;
  for (int k = 0; k < n; ++k)
    for (int p : fa[size_t(k)])
      if (p == 0) wte_node = k;
  REQUIRE(wte_node >= 0);
  CHECK(wte_node < n - 1);
  bool head_reads_wte = false;
  for (auto& s : g.nodes()[size_t(n - 1)].params) head_reads_wte |= s.name == "wte";
  if (!head_reads_wte)  // the loss node may follow the head
    for (auto& s : g.nodes()[size_t(n - 2)].params) head_reads_wte |= s.name == "wte";
  CHECK(head_reads_wte);
}

TEST_CASE("a bucket never mixes late nodes' parameters with the others'", "[buckets]") {
  // Nodes 0..3; 0 and 2 are a sequence-parallel region's norms (late: the
  // executor reports them after the others, 3 1 then 2 0).
  grad_bucketer b({100, 10, 100, 10}, {{1}, {0}, {3}, {2}}, -1, 1000, {}, {1, 0, 1, 0});
  std::vector<grad_bucket> all;
  for (int k : {3, 1, 2, 0})
    for (auto& x : b.node_finished(k)) all.push_back(x);
  for (auto& x : b.finish()) all.push_back(x);
  REQUIRE(all.size() == 2);  // without the late flags: one bucket of all four
  CHECK(all[0].params == std::vector<int>{2, 0});
  CHECK(all[1].params == std::vector<int>{3, 1});
  check_each_once(all, 4);
  CHECK_THROWS_AS(grad_bucketer({4}, {{0}}, -1, 8, {}, {1, 0}), error);
}
