// The GPT sample index, --split and blends: pure functions of (seed, g).
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "core/error.hpp"
#include "model/indexed_corpus.hpp"
#include "model/text/gpt_dataset.hpp"

using namespace merak;
using namespace merak::model::text;

namespace {

// Documents in memory: document d holds ids 1000 d + 0, 1, 2, ...
class fake_documents final : public document_source {
 public:
  explicit fake_documents(std::vector<int64_t> lengths) : lengths_(std::move(lengths)) {}
  int64_t documents() const override { return int64_t(lengths_.size()); }
  int64_t document_tokens(int64_t d) const override { return lengths_[size_t(d)]; }
  void read(int64_t d, int64_t offset, int64_t count, int32_t* out, int64_t) const override {
    REQUIRE(offset + count <= lengths_[size_t(d)]);
    for (int64_t i = 0; i < count; ++i) out[i] = int32_t(1000 * d + offset + i);
  }
  const std::string& name() const override { return name_; }

 private:
  std::vector<int64_t> lengths_;
  std::string name_ = "fake";
};

}  // namespace

TEST_CASE("permute is a bijection that depends on its key", "[data][gpt]") {
  for (uint64_t n : {1, 2, 3, 7, 64, 1000, 4097}) {
    std::set<uint64_t> seen;
    for (uint64_t i = 0; i < n; ++i) seen.insert(permute(42, n, i));
    CHECK(seen.size() == n);
    CHECK(*seen.rbegin() == n - 1);
  }
  int moved = 0;
  for (uint64_t i = 0; i < 1000; ++i) moved += permute(1, 1000, i) != permute(2, 1000, i);
  CHECK(moved > 900);
}

TEST_CASE("the --split flag parses as Megatron's and splits documents as its _get_split_indices",
          "[data][gpt]") {
  auto s = parse_split("969,30,1");
  CHECK(s[0] == Approx(0.969));
  CHECK(s[2] == Approx(0.001));
  CHECK(parse_split("99,1")[2] == 0);
  // Megatron: [0, round(.969 N), +round(.03 N), +round(.001 N)], shifted by the excess.
  CHECK(split_documents(s, 1000) == std::array<int64_t, 4>{0, 969, 999, 1000});
  CHECK(split_documents(s, 10) == std::array<int64_t, 4>{0, 10, 10, 10});
  CHECK(split_documents(parse_split("1,1,1"), 10) == std::array<int64_t, 4>{0, 4, 7, 10});
  // Python's round: halves to even.
  CHECK(split_documents(parse_split("1,1,2"), 2) == std::array<int64_t, 4>{0, 1, 1, 2});
  CHECK(split_documents(parse_split("1,1"), 3) == std::array<int64_t, 4>{0, 1, 3, 3});
  CHECK_THROWS_WITH(parse_split("9,x"), Catch::Contains("--split '9,x'"));
  CHECK_THROWS_WITH(parse_split("1,2,3,4"), Catch::Contains("up to three"));
  CHECK_THROWS_WITH(parse_split("0,0"), Catch::Contains("sum to 0"));
  CHECK_THROWS_WITH(parse_split("-1,2"), Catch::Contains("non-negative"));
}

TEST_CASE("unshuffled samples are consecutive windows sharing one token", "[data][gpt]") {
  auto docs = std::make_shared<fake_documents>(std::vector<int64_t>{5, 0, 7, 3});
  gpt_samples s(docs, 0, 4, 4, false, "t");
  CHECK(s.tokens() == 15);
  CHECK(s.samples_per_epoch() == 3);  // (15 - 1) / 4
  std::vector<int32_t> stream{0,    1,    2,    3,    4,    2000, 2001, 2002,
                              2003, 2004, 2005, 2006, 3000, 3001, 3002};
  for (int64_t g = 0; g < 6; ++g) {
    std::vector<int32_t> out(5);
    s.sample(7, g, out.data(), 1 << 30);
    const auto start = stream.begin() + (g % 3) * 4;
    CHECK(out == std::vector<int32_t>(start, start + 5));
  }
}

TEST_CASE("shuffled samples of an epoch are the windows of a shuffled document order",
          "[data][gpt]") {
  std::vector<int64_t> lengths(50);
  for (size_t i = 0; i < lengths.size(); ++i) lengths[i] = int64_t(i % 7) + 1;
  auto docs = std::make_shared<fake_documents>(lengths);
  const int T = 3;
  gpt_samples s(docs, 0, 50, T, true, "t");
  const int64_t n = s.samples_per_epoch();
  for (uint64_t seed : {1, 2}) {
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      // Every sample of the epoch once: sorted by where they start, each
      // begins T tokens after the one before (in the epoch's stream).
      std::vector<std::vector<int32_t>> samples;
      std::set<std::pair<int64_t, int64_t>> starts;
      for (int64_t i = 0; i < n; ++i) {
        std::vector<int32_t> out(T + 1);
        s.sample(seed, epoch * n + i, out.data(), 1 << 30);
        auto p = s.locate(seed, epoch * n + i);
        starts.insert({p.document, p.offset});
        samples.push_back(out);
      }
      CHECK(int64_t(starts.size()) == n);
    }
  }
  // Pure: the same (seed, g) gives the same sample in any order of calls.
  std::vector<int32_t> a(T + 1), b(T + 1), c(T + 1);
  s.sample(5, 3 * n + 2, a.data(), 1 << 30);
  s.sample(5, 0, c.data(), 1 << 30);
  s.sample(6, 1, c.data(), 1 << 30);
  s.sample(5, 3 * n + 2, b.data(), 1 << 30);
  CHECK(a == b);
  // Seeds and epochs reorder: the first samples differ.
  int differ = 0;
  for (int64_t i = 0; i < 10; ++i) {
    std::vector<int32_t> x(T + 1), y(T + 1), z(T + 1);
    s.sample(1, i, x.data(), 1 << 30);
    s.sample(2, i, y.data(), 1 << 30);
    s.sample(1, n + i, z.data(), 1 << 30);
    differ += (x != y) + (x != z);
  }
  CHECK(differ > 15);
}

TEST_CASE("a range too short for one sample is refused naming it", "[data][gpt]") {
  auto docs = std::make_shared<fake_documents>(std::vector<int64_t>{3, 1});
  CHECK_THROWS_WITH(gpt_samples(docs, 0, 2, 4, true, "the train split of 'x'"),
                    Catch::Contains("the train split of 'x' (documents [0, 2)) has 4 tokens"));
}

TEST_CASE("a blend follows its weights as Megatron's greedy rule", "[data][gpt]") {
  blend_schedule b({0.3, 0.7});
  // Megatron's first picks for (0.3, 0.7): errors at i = max(i, 1).
  std::vector<int> first;
  for (int64_t g = 0; g < 10; ++g) first.push_back(b.at(g).dataset);
  CHECK(first == std::vector<int>{1, 0, 1, 1, 0, 1, 1, 0, 1, 1});
  std::array<int64_t, 2> counts{0, 0};
  for (int64_t g = 0; g < 3 * blend_schedule::kPeriod + 123; ++g) {
    auto p = b.at(g);
    CHECK(p.index == counts[size_t(p.dataset)]);  // each dataset's samples in order, none skipped
    ++counts[size_t(p.dataset)];
  }
  CHECK(double(counts[0]) / double(counts[0] + counts[1]) == Approx(0.3).margin(1e-4));
  CHECK_THROWS_WITH(blend_schedule({1.0, 0.0}), Catch::Contains("weight 0"));
}

TEST_CASE("the --data-path flag takes a prefix, weighted pairs or several prefixes", "[data][gpt]") {
  auto one = parse_data_path({"a"});
  CHECK(one.prefixes == std::vector<std::string>{"a"});
  CHECK(one.weights.empty());
  auto two = parse_data_path({"0.3", "a", "0.7", "b"});
  CHECK(two.prefixes == std::vector<std::string>{"a", "b"});
  CHECK(two.weights == std::vector<double>{0.3, 0.7});
  CHECK(parse_data_path({"a", "b"}).weights.empty());
  CHECK_THROWS_WITH(parse_data_path({"0.3", "a", "b", "c"}), Catch::Contains("mixes weights"));
  CHECK_THROWS_WITH(parse_data_path({"0.3", "a", "0.7"}),
                    Catch::Contains("'0.3' looks like a weight"));
  CHECK_THROWS_WITH(parse_data_path({"-1", "a"}), Catch::Contains("weight -1"));
}
