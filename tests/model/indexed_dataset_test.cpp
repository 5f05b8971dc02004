// Megatron's indexed dataset (MMIDIDX v1) and llm.c token files: files laid
// out byte by byte here from the published layout, read back; merak's
// writer; and damage refused naming the file and field.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "model/text/indexed_dataset.hpp"
#include "model/text/token_file.hpp"

using namespace merak;
using namespace merak::model::text;
namespace fs = std::filesystem;

namespace {

struct temp_dir {
  fs::path path;
  temp_dir() {
    char tmpl[] = "/tmp/merak_idx_XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~temp_dir() { fs::remove_all(path); }
  std::string prefix(const char* name) const { return (path / name).string(); }
};

template <typename T>
void put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// The MMIDIDX v1 layout by hand: uint16 documents of one sequence each.
struct layout {
  std::string idx, bin;
  explicit layout(const std::vector<std::vector<uint16_t>>& docs, uint8_t code = 8) {
    idx.append("MMIDIDX\0\0", 9);
    put<uint64_t>(idx, 1);
    idx.push_back(char(code));
    put<uint64_t>(idx, docs.size());
    put<uint64_t>(idx, docs.size() + 1);
    for (auto& d : docs) put<int32_t>(idx, int32_t(d.size()));
    int64_t pointer = 0;
    for (auto& d : docs) {
      put<int64_t>(idx, pointer);
      pointer += int64_t(d.size()) * 2;
      for (uint16_t t : d) put<uint16_t>(bin, t);
    }
    for (size_t i = 0; i <= docs.size(); ++i) put<int64_t>(idx, int64_t(i));
  }
  void save(const std::string& prefix) const {
    write(prefix + ".idx", idx);
    write(prefix + ".bin", bin);
  }
};

const std::vector<std::vector<uint16_t>> kDocs = {{1, 2, 3}, {}, {40000, 5}, {6, 7, 8, 9}};

std::vector<int32_t> read_all(const document_source& d, int64_t doc) {
  std::vector<int32_t> out(size_t(d.document_tokens(doc)));
  d.read(doc, 0, int64_t(out.size()), out.data(), 65536);
  return out;
}

std::string error_of(const std::string& prefix) {
  try {
    indexed_dataset d(prefix);
  } catch (const merak::error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("an index laid out from Megatron's definition reads back exactly", "[data][indexed]") {
  temp_dir t;
  layout(kDocs).save(t.prefix("a"));
  indexed_dataset d(t.prefix("a"));
  CHECK(d.dtype() == index_dtype::u16);
  CHECK(d.documents() == 4);
  CHECK(d.sequences() == 4);
  CHECK(d.total_tokens() == 9);
  CHECK(d.sequence_pointer(2) == 6);
  for (int64_t i = 0; i < 4; ++i) {
    auto ids = read_all(d, i);
    CHECK(std::vector<int32_t>(kDocs[size_t(i)].begin(), kDocs[size_t(i)].end()) == ids);
  }
  int32_t part[2];
  d.read(3, 1, 2, part, 65536);
  CHECK(part[0] == 7);
  CHECK(part[1] == 8);
}

TEST_CASE("a document of several sequences reads across them", "[data][indexed]") {
  temp_dir t;
  layout l(kDocs);
  // One document of sequences 0..2, then one of sequence 3: index {0, 3, 4}.
  l.idx.resize(l.idx.size() - 5 * 8);
  put<int64_t>(l.idx, 0);
  put<int64_t>(l.idx, 3);
  put<int64_t>(l.idx, 4);
  std::memcpy(&l.idx[26], "\x03\0\0\0\0\0\0\0", 8);
  l.save(t.prefix("a"));
  indexed_dataset d(t.prefix("a"));
  REQUIRE(d.documents() == 2);
  CHECK(read_all(d, 0) == std::vector<int32_t>{1, 2, 3, 40000, 5});
  int32_t two[2];
  d.read(0, 2, 2, two, 65536);
  CHECK(two[0] == 3);
  CHECK(two[1] == 40000);
}

TEST_CASE("merak's writer writes the layout Megatron's reader expects", "[data][indexed]") {
  temp_dir t;
  {
    indexed_dataset_writer w(t.prefix("w"), index_dtype::u16);
    for (auto& d : kDocs) {
      std::vector<int32_t> ids(d.begin(), d.end());
      w.add_document(ids);
    }
    w.finish();
  }
  // Byte for byte what the layout above gives.
  auto slurp = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  layout expect(kDocs);
  CHECK(slurp(t.prefix("w") + ".idx") == expect.idx);
  CHECK(slurp(t.prefix("w") + ".bin") == expect.bin);
  CHECK_FALSE(fs::exists(t.prefix("w") + ".bin.tmp"));
}

TEST_CASE("every dtype round-trips through the writer and the reader", "[data][indexed]") {
  temp_dir t;
  for (auto code : {index_dtype::u8, index_dtype::i8, index_dtype::i16, index_dtype::u16,
                    index_dtype::i32, index_dtype::i64}) {
    const std::string p = t.prefix("d");
    std::vector<int32_t> ids{0, 1, 100, 127};
    {
      indexed_dataset_writer w(p, code);
      w.add_document(ids);
      w.finish();
    }
    indexed_dataset d(p);
    CHECK(d.dtype() == code);
    CHECK(fs::file_size(p + ".bin") == 4 * dtype_bytes(code));
    CHECK(read_all(d, 0) == ids);
  }
}

TEST_CASE("the writer refuses an id its dtype cannot hold, naming it", "[data][indexed]") {
  temp_dir t;
  indexed_dataset_writer w(t.prefix("x"), index_dtype::u16);
  std::vector<int32_t> ids{1, 70000};
  CHECK_THROWS_WITH(w.add_document(ids),
                    Catch::Contains("document 0: id 70000 at position 1") && Catch::Contains("uint16"));
}

TEST_CASE("a writer left unfinished leaves no files behind", "[data][indexed]") {
  temp_dir t;
  {
    indexed_dataset_writer w(t.prefix("u"), index_dtype::u16);
    std::vector<int32_t> ids{1, 2};
    w.add_document(ids);
  }
  CHECK(fs::is_empty(t.path));
}

TEST_CASE("ids at or above the model's vocabulary are refused naming file and byte",
          "[data][indexed]") {
  temp_dir t;
  layout(kDocs).save(t.prefix("a"));
  indexed_dataset d(t.prefix("a"));
  int32_t out[2];
  CHECK_THROWS_WITH(d.read(2, 0, 2, out, 1000), Catch::Contains("a.bin") &&
                                                    Catch::Contains("id 40000 at byte 6") &&
                                                    Catch::Contains("[0, 1000)"));
}

TEST_CASE("damaged indexes are refused naming the file and the field", "[data][indexed]") {
  temp_dir t;
  const std::string p = t.prefix("bad");
  const layout good(kDocs);
  auto with = [&](std::string idx, std::string bin) {
    write(p + ".idx", idx);
    write(p + ".bin", bin);
    return error_of(p);
  };
  SECTION("short") {
    CHECK_THAT(with(good.idx.substr(0, 20), good.bin), Catch::Contains("bad.idx' is 20 bytes"));
  }
  SECTION("bad magic") {
    auto idx = good.idx;
    idx[0] = 'X';
    CHECK_THAT(with(idx, good.bin), Catch::Contains("bad.idx': magic at byte 0"));
  }
  SECTION("bad version") {
    auto idx = good.idx;
    idx[9] = 2;
    CHECK_THAT(with(idx, good.bin), Catch::Contains("version 2 at byte 9"));
  }
  SECTION("unknown dtype") {
    auto idx = good.idx;
    idx[17] = 9;
    CHECK_THAT(with(idx, good.bin), Catch::Contains("dtype code 9 at byte 17"));
  }
  SECTION("float dtype") {
    auto idx = good.idx;
    idx[17] = 7;
    CHECK_THAT(with(idx, good.bin), Catch::Contains("dtype float32 (code 7) at byte 17"));
  }
  SECTION("sequence count larger than the file") {
    auto idx = good.idx;
    std::memcpy(&idx[18], "\xff\xff\xff\xff\xff\xff\xff\x7f", 8);
    CHECK_THAT(with(idx, good.bin),
               Catch::Contains("sequence count 9223372036854775807 at byte 18"));
  }
  SECTION("document count larger than the file") {
    auto idx = good.idx;
    std::memcpy(&idx[26], "\x00\x00\x00\x00\x00\x00\x00\x10", 8);
    CHECK_THAT(with(idx, good.bin),
               Catch::Contains("document count + 1 = ") && Catch::Contains("at byte 26"));
  }
  SECTION("trailing bytes") {
    CHECK_THAT(with(good.idx + "x", good.bin),
               Catch::Contains("but its counts (4 sequences, 4 documents)"));
  }
  SECTION("truncated token file") {
    CHECK_THAT(with(good.idx, good.bin.substr(0, 15)),
               Catch::Contains("sequence 3's pointer 10 at byte 74") &&
                   Catch::Contains("bad.bin' (15 bytes)"));
  }
  SECTION("pointer past the end") {
    auto idx = good.idx;
    std::memcpy(&idx[34 + 16 + 8], "\x00\x01\x00\x00\x00\x00\x00\x00", 8);  // sequence 1: 256
    CHECK_THAT(with(idx, good.bin), Catch::Contains("sequence 1's pointer 256 at byte 58"));
  }
  SECTION("negative length") {
    auto idx = good.idx;
    std::memcpy(&idx[34 + 4], "\xff\xff\xff\xff", 4);
    CHECK_THAT(with(idx, good.bin), Catch::Contains("sequence 1's length -1 at byte 38"));
  }
  SECTION("document index not rising") {
    auto idx = good.idx;
    std::memcpy(&idx[34 + 48 + 16], "\x09\0\0\0\0\0\0\0", 8);  // entry 2 = 9 > 4 sequences
    CHECK_THAT(with(idx, good.bin), Catch::Contains("document index entry 2 at byte 98 is 9"));
  }
  SECTION("document index not starting at 0") {
    auto idx = good.idx;
    idx[34 + 48] = 1;
    CHECK_THAT(with(idx, good.bin), Catch::Contains("entry 0 at byte 82 is 1"));
  }
  SECTION("missing token file") {
    write(p + ".idx", good.idx);
    fs::remove(p + ".bin");
    CHECK_THAT(error_of(p),
               Catch::Contains("cannot open token file") && Catch::Contains("bad.bin"));
  }
}

TEST_CASE("llm.c token files read back, documents starting at the delimiter", "[data][llmc]") {
  temp_dir t;
  const std::string p = t.prefix("tok.bin");
  std::string bytes;
  put<int32_t>(bytes, 20240520);
  put<int32_t>(bytes, 1);
  put<int32_t>(bytes, 6);
  bytes.resize(1024, '\0');
  for (uint16_t v : {50256, 11, 12, 50256, 13, 14}) put<uint16_t>(bytes, v);
  write(p, bytes);
  token_file f(p);
  CHECK(f.tokens() == 6);
  REQUIRE(f.documents() == 2);
  std::vector<int32_t> out(3);
  f.read(1, 0, 3, out.data(), 50257);
  CHECK(out == std::vector<int32_t>{50256, 13, 14});
  CHECK(open_documents(p)->documents() == 2);
  SECTION("damage") {
    auto refuse = [&](std::string b, const char* what) {
      write(p, b);
      CHECK_THROWS_WITH(token_file(p), Catch::Contains("tok.bin") && Catch::Contains(what));
    };
    refuse(bytes.substr(0, 100), "too short for llm.c's 1024-byte header");
    refuse(bytes.substr(0, bytes.size() - 1), "token count 6 at byte 8 needs 1036 bytes");
    auto b = bytes;
    b[0] = 1;
    refuse(b, "magic");
    b = bytes;
    b[4] = 3;
    refuse(b, "version 3 at byte 4");
  }
}
