#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "model/data.hpp"
#include "tests/model/test_util.hpp"

using namespace merak;
using namespace merak::model;

TEST_CASE("training batches are a pure function of seed and step", "[data]") {
  text_corpus c(test::small_text(5000), 32, 0.1, "t");
  auto a = c.train_batch(1, 10, 8);
  auto b = c.train_batch(1, 10, 8);
  auto other = c.train_batch(1, 11, 8);
  CHECK(std::memcmp(a.tokens.raw(), b.tokens.raw(), a.tokens.bytes()) == 0);
  CHECK(std::memcmp(a.tokens.raw(), other.tokens.raw(), a.tokens.bytes()) != 0);
  // Targets are the tokens shifted by one.
  for (int r = 0; r < 8; ++r)
    for (int t = 0; t + 1 < 32; ++t)
      CHECK(a.targets.data<int32_t>()[r * 32 + t] == a.tokens.data<int32_t>()[r * 32 + t + 1]);
}

TEST_CASE("a slice of rows of a batch equals those rows of the whole batch", "[data]") {
  text_corpus c(test::small_text(5000), 16, 0.1, "t");
  auto whole = c.train_batch(3, 4, 8);
  auto part = c.train_batch(3, 4, 8, 4, 4);
  CHECK(std::memcmp(part.tokens.raw(), whole.tokens.data<int32_t>() + 4 * 16,
                    part.tokens.bytes()) == 0);
}

TEST_CASE("validation windows stay inside the held-out part", "[data]") {
  std::vector<uint8_t> bytes(1000, 'a');
  for (size_t i = 900; i < 1000; ++i) bytes[i] = 'v';  // the validation part
  text_corpus c(bytes, 8, 0.1, "t");
  CHECK(c.val_size() == 100);
  for (int64_t i = 0; i < c.val_batches(4); ++i) {
    auto b = c.val_batch(i, 4);
    for (int64_t k = 0; k < b.tokens.numel(); ++k) CHECK(b.tokens.data<int32_t>()[k] == 'v');
  }
}

TEST_CASE("bad corpora are refused with the file named", "[data]") {
  CHECK_THROWS_WITH(text_corpus("/nonexistent/merak.txt", 8),
                    Catch::Contains("cannot open data file '/nonexistent/merak.txt'"));
  CHECK_THROWS_WITH(text_corpus(std::vector<uint8_t>{}, 8, 0.1, "empty.txt"),
                    Catch::Contains("'empty.txt' is empty"));
  CHECK_THROWS_WITH(text_corpus(test::small_text(100), 64, 0.1, "short.txt"),
                    Catch::Contains("too short for --seq 64"));
}
