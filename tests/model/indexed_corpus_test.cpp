// Training batches from indexed datasets on disk (merak train --data-path).
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <set>

#include "core/error.hpp"
#include "model/indexed_corpus.hpp"
#include "model/text/indexed_dataset.hpp"

using namespace merak;
using namespace merak::model;
namespace fs = std::filesystem;

namespace {

struct datasets {
  fs::path dir;
  datasets() {
    char tmpl[] = "/tmp/merak_corpus_XXXXXX";
    dir = ::mkdtemp(tmpl);
  }
  ~datasets() { fs::remove_all(dir); }
  // `docs` documents of 10..29 tokens; ids offset by `base` (to tell datasets apart).
  std::string make(const char* name, int docs, int base) {
    const std::string p = (dir / name).string();
    text::indexed_dataset_writer w(p, text::index_dtype::u16);
    for (int d = 0; d < docs; ++d) {
      std::vector<int32_t> ids(size_t(10 + d % 20));
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = base + int32_t((d * 7 + i) % 50);
      w.add_document(ids);
    }
    w.finish();
    return p;
  }
};

bool same(const tensor& a, const tensor& b, int64_t offset_a = 0) {
  return std::memcmp(a.data<int32_t>() + offset_a, b.raw(), b.bytes()) == 0;
}

}  // namespace

TEST_CASE("indexed batches are a pure function of seed and step, sliceable by rows",
          "[data][indexed]") {
  datasets d;
  const auto p = d.make("a", 200, 0);
  indexed_corpus c({p}, "90,10,0", 16, 256);
  auto a = c.train_batch(1, 5, 8);
  indexed_corpus again({p}, "90,10,0", 16, 256);
  CHECK(same(a.tokens, again.train_batch(1, 5, 8).tokens));
  CHECK_FALSE(same(a.tokens, c.train_batch(1, 6, 8).tokens));
  CHECK_FALSE(same(a.tokens, c.train_batch(2, 5, 8).tokens));
  // Rows 4..7 alone are rows 4..7 of the whole batch (data-parallel ranks).
  CHECK(same(a.tokens, c.train_batch(1, 5, 8, 4, 4).tokens, 4 * 16));
  CHECK(same(a.targets, c.train_batch(1, 5, 8, 4, 4).targets, 4 * 16));
  for (int r = 0; r < 8; ++r)
    for (int t = 0; t + 1 < 16; ++t)
      CHECK(a.targets.data<int32_t>()[r * 16 + t] == a.tokens.data<int32_t>()[r * 16 + t + 1]);
  // Sample g is row g mod B of step g / B: the samples consumed are the
  // position, whatever the batch size that consumed them.
  auto b4 = c.train_batch(1, 3, 4);  // samples 12..15
  auto b2 = c.train_batch(1, 7, 2);  // samples 14, 15
  CHECK(same(b4.tokens, b2.tokens, 2 * 16));
}

TEST_CASE("validation batches come from the valid split's documents in order", "[data][indexed]") {
  datasets d;
  const auto p = d.make("a", 100, 0);
  indexed_corpus c({p}, "90,10,0", 8, 256);
  // Valid documents are 90..99: their first ids are (d * 7) % 50.
  auto v = c.val_batch(0, 2);
  CHECK(v.tokens.data<int32_t>()[0] == (90 * 7) % 50);
  CHECK(c.val_batches(2) >= 1);
  CHECK(same(v.tokens, c.val_batch(c.val_batches(2), 2).tokens));  // wraps
  CHECK_THROWS_WITH(
      indexed_corpus({p}, "100,0,0", 8, 256),
      Catch::Contains("--split 100,0,0: no dataset") && Catch::Contains("valid split"));
}

TEST_CASE("a blend draws from each dataset by weight", "[data][indexed]") {
  datasets d;
  const auto a = d.make("a", 100, 0), b = d.make("b", 100, 100);
  indexed_corpus c({"0.25", a, "0.75", b}, "90,10,0", 8, 256);
  int from_b = 0, rows = 0;
  for (int64_t step = 0; step < 50; ++step) {
    auto batch = c.train_batch(3, step, 8);
    for (int r = 0; r < 8; ++r, ++rows) from_b += batch.tokens.data<int32_t>()[r * 8] >= 100;
  }
  CHECK(double(from_b) / rows == Approx(0.75).margin(0.01));
}

TEST_CASE("ids outside the model's vocabulary are refused naming the token file",
          "[data][indexed]") {
  datasets d;
  const auto p = d.make("big", 100, 200);  // ids 200..249
  indexed_corpus c({p}, "90,10,0", 8, 220);
  bool refused = false;
  try {
    for (int64_t s = 0; s < 20; ++s) c.train_batch(1, s, 8);
  } catch (const merak::error& e) {
    refused = std::string(e.what()).find("big.bin': id ") != std::string::npos &&
              std::string(e.what()).find("[0, 220)") != std::string::npos;
  }
  CHECK(refused);
  CHECK_THROWS_WITH(indexed_corpus({(d.dir / "none").string()}, "90,10,0", 8, 256),
                    Catch::Contains("none.idx"));
}
