// The parameter fetcher's decisions (which buckets are gathered, kept and
// let go of under parameter shards), checked through its hooks: a node's
// buckets whole when it runs, gathers taken in the order they were asked
// for, at most the running node's and the next node's buckets held, none
// asked for twice while held, nothing left out at the end.
#include <catch2/catch.hpp>

#include <algorithm>
#include <deque>
#include <set>

#include "core/error.hpp"
#include "model/parameter_fetch.hpp"

using namespace merak;
using namespace merak::model;

namespace {

// Nodes 3..8 of a stage; node 7 reads no parameter, node 8 shares bucket 0
// with node 3 (a tied embedding and LM head).
const int kFirst = 3;
const std::vector<std::vector<int>> kNodes = {{0}, {0, 1}, {1}, {2, 3}, {}, {0}};
const int kBuckets = 4;

struct recorder {
  std::deque<int> pending;    // asked for, not taken: in order
  std::set<int> whole;        // taken, not released
  std::vector<int> requests;  // every request, in order
  int releases = 0;
  model::parameter_fetcher::hooks hooks() {
    return {[this](int b) {
              REQUIRE(std::find(pending.begin(), pending.end(), b) == pending.end());
              REQUIRE(whole.count(b) == 0);
              pending.push_back(b);
              requests.push_back(b);
            },
            [this](int b) {
              REQUIRE(!pending.empty());
              REQUIRE(pending.front() == b);  // the reducer finishes in request order
              pending.pop_front();
              whole.insert(b);
            },
            [this](int b) {
              REQUIRE(whole.count(b) == 1);  // taken before it is let go of
              whole.erase(b);
              ++releases;
            }};
  }
};

// Runs nodes in `order` with the executor's `next` guesses (forward n + 1,
// backward n - 1); checks each node's buckets and the bound on what is held.
void run(parameter_fetcher& f, recorder& r, const std::vector<int>& order, int step) {
  const int last = kFirst + int(kNodes.size());
  for (int n : order) {
    int next = n + step;
    if (next < kFirst || next >= last) next = -1;
    f.before_node(n, next);
    std::set<int> bound(kNodes[size_t(n - kFirst)].begin(), kNodes[size_t(n - kFirst)].end());
    for (int b : kNodes[size_t(n - kFirst)]) CHECK(r.whole.count(b) == 1);
    if (next >= 0) bound.insert(kNodes[size_t(next - kFirst)].begin(), kNodes[size_t(next - kFirst)].end());
    CHECK(f.held() <= int(bound.size()));
    CHECK(int(r.whole.size() + r.pending.size()) == f.held());
  }
}

}  // namespace

TEST_CASE("the parameter fetcher gathers each node's buckets, one node ahead, and lets go after",
          "[model][sharding]") {
  recorder r;
  parameter_fetcher f(kNodes, kFirst, kBuckets, r.hooks());
  run(f, r, {3, 4, 5, 6, 7, 8}, +1);  // forward
  run(f, r, {8, 7, 6, 5, 4, 3}, -1);  // backward
  f.release_all();
  CHECK(r.whole.empty());
  CHECK(r.pending.empty());
  CHECK(f.held() == 0);
  CHECK(f.most_held() <= 3);
  // Forward: 0 1 (node 4 ahead), 2 3 (node 6 ahead), 0 (node 8 ahead of 7);
  // backward from node 8 (bucket 0 still whole): 2 3, 1, 0.
  CHECK(r.requests == std::vector<int>{0, 1, 2, 3, 0, 2, 3, 1, 0});
  CHECK(f.requests() == int64_t(r.requests.size()));
  CHECK(r.releases == int(r.requests.size()));
}

TEST_CASE("the parameter fetcher takes a wrong guess's gather before it lets it go",
          "[model][sharding]") {
  recorder r;
  parameter_fetcher f(kNodes, kFirst, kBuckets, r.hooks());
  f.before_node(5, 6);  // fetches bucket 2 and 3 ahead
  f.before_node(3, 4);  // but node 3 runs (a recomputed segment's start)
  CHECK(r.whole.count(0) == 1);
  CHECK(r.pending.size() + r.whole.size() == size_t(f.held()));
  CHECK(r.whole.count(2) == 0);
  CHECK(r.whole.count(3) == 0);
  f.release_all();
  CHECK(r.whole.empty());
  CHECK(r.pending.empty());
}

TEST_CASE("two replicas fed the same node sequence ask for the same gathers", "[model][sharding]") {
  recorder a, b;
  parameter_fetcher fa(kNodes, kFirst, kBuckets, a.hooks()), fb(kNodes, kFirst, kBuckets, b.hooks());
  const std::vector<std::pair<int, int>> seq = {{3, 4}, {4, 5}, {3, 4}, {4, 5}, {5, 6}, {6, 7},
                                                 {8, -1}, {8, 7}, {6, 5}, {5, 4}, {4, 3}, {3, -1}};
  for (auto [n, next] : seq) {
    fa.before_node(n, next);
    fb.before_node(n, next);
  }
  fa.release_all();
  fb.release_all();
  CHECK(a.requests == b.requests);
  CHECK_THROWS_AS(fa.before_node(9, -1), merak::error);
  CHECK_THROWS_AS(parameter_fetcher({{5}}, 0, 2, recorder().hooks()), merak::error);
}

TEST_CASE("a held span's buckets stay whole while its nodes run once per sub-batch",
          "[model][sharding]") {
  // Two sub-batches each run nodes 3..5, then 6..8 (sub-pipelined TP).
  const std::vector<int> twice = {3, 4, 5, 3, 4, 5, 6, 7, 8, 6, 7, 8};
  auto requests = [&](bool hold) {
    recorder r;
    parameter_fetcher f(kNodes, kFirst, kBuckets, r.hooks());
    for (size_t i = 0; i < twice.size(); ++i) {
      if (hold && i % 6 == 0) f.hold(twice[i], twice[i] + 3);
      const int n = twice[i];
      f.before_node(n, n + 1 < kFirst + int(kNodes.size()) ? n + 1 : -1);
      for (int b : kNodes[size_t(n - kFirst)]) CHECK(r.whole.count(b) == 1);
    }
    f.hold(0, 0);
    f.release_all();
    CHECK(r.whole.empty());
    CHECK(r.pending.empty());
    return r.requests;
  };
  // Without a hold the second sub-batch gathers again what the first
  // fetched; with it every bucket once (0, read by both spans, stays).
  CHECK(requests(false).size() > 4);
  CHECK(requests(true) == std::vector<int>{0, 1, 2, 3});
}

TEST_CASE("a sequence-parallel region's bucket is gathered once a pass, and looked past",
          "[model][sharding]") {
  // A layer under sequence parallelism: bucket 2 holds the norms (ln1, ln2,
  // ln_f: nodes 0, 4, 8), buckets 0 and 1 the attention's and the MLP's
  // weights; nodes 2 and 6 (attention core, GELU) read nothing.
  const std::vector<std::vector<int>> nodes = {{2}, {0}, {}, {0}, {2}, {1}, {}, {1}, {2}};
  recorder r;
  parameter_fetcher f(nodes, 0, 3, r.hooks());
  CHECK(f.pinned(2));
  CHECK_FALSE(f.pinned(0));
  CHECK_FALSE(f.pinned(1));
  for (int n = 0; n < 9; ++n) {
    f.before_node(n, n + 1 < 9 ? n + 1 : -1);  // forward
    for (int b : nodes[size_t(n)]) CHECK(r.whole.count(b) == 1);
    CHECK(f.held() <= 3);
  }
  for (int n = 8; n >= 0; --n) {
    f.before_node(n, n - 1);  // backward
    for (int b : nodes[size_t(n)]) CHECK(r.whole.count(b) == 1);
    CHECK(f.held() <= 3);
  }
  // Forward: 2 and 0, then 1 ahead of fc (past ln2); backward: 1 again
  // (let go of at ln_f), then 0 ahead of the attention (past ln2).
  CHECK(r.requests == std::vector<int>{2, 0, 1, 1, 0});
  f.release_all();
  CHECK(r.whole.empty());
  CHECK(r.pending.empty());
  // Two layers whose norms (bucket 2) sit between the tied embedding's
  // readers: the embedding, the first layer's attention (bucket 0 too) and
  // the head. The norms are pinned; bucket 0, looked at past them, has two
  // runs and is not.
  parameter_fetcher tied({{0}, {2}, {0}, {}, {0}, {2}, {1}, {1}, {2}, {1}, {1}, {2}, {1}, {2}, {0}},
                         0, 3, recorder().hooks());
  CHECK(tied.pinned(2));
  CHECK_FALSE(tied.pinned(0));
  CHECK_FALSE(tied.pinned(1));
  // A tied weight read at both ends (two runs) is not pinned, nor a bucket
  // whose runs enclose no other bucket's readers.
  CHECK_FALSE(parameter_fetcher({{0}, {1}, {0}}, 0, 2, recorder().hooks()).pinned(0));
  CHECK_FALSE(
      parameter_fetcher({{0}, {1}, {0}, {1}, {0}, {1}}, 0, 2, recorder().hooks()).pinned(0));
}
