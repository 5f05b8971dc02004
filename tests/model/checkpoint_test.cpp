// safetensors files: round trip, and every kind of damage is detected.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "model/safetensors.hpp"
#include "tests/model/test_util.hpp"

using namespace merak;
using namespace merak::model;
namespace fs = std::filesystem;

namespace {

std::string write_sample(const fs::path& path) {
  auto a = test::random_tensor({3, 4}, 1);
  auto b = test::random_ids({5}, 100, 2);
  write_safetensors(path.string(), {{"a", &a}, {"b", &b}}, {{"note", "hello"}});
  return path.string();
}

std::string read_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << s;
}

}  // namespace

TEST_CASE("safetensors round trip keeps tensors and metadata", "[checkpoint]") {
  auto dir = fs::temp_directory_path() / ("merak_st_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto path = write_sample(dir / "x.safetensors");
  auto f = read_safetensors(path);
  auto a = test::random_tensor({3, 4}, 1);
  auto b = test::random_ids({5}, 100, 2);
  REQUIRE(f.tensors.count("a") == 1);
  CHECK(f.tensors.at("a").shape() == shape_t{3, 4});
  CHECK(std::memcmp(f.tensors.at("a").raw(), a.raw(), a.bytes()) == 0);
  CHECK(f.tensors.at("b").type() == dtype::i32);
  CHECK(std::memcmp(f.tensors.at("b").raw(), b.raw(), b.bytes()) == 0);
  CHECK(f.metadata.at("note") == "hello");
  CHECK(f.metadata.count("merak.crc32c") == 0);
  // The layout is the public format: 8-byte little-endian header length, JSON.
  auto bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(bytes[i])) << (8 * i);
  CHECK(bytes[8] == '{');
  CHECK(bytes.size() == 8 + n + a.bytes() + b.bytes());
  CHECK_FALSE(fs::exists(path + ".tmp"));
  fs::remove_all(dir);
}

TEST_CASE("damaged safetensors files are reported, naming the file", "[checkpoint]") {
  auto dir = fs::temp_directory_path() / ("merak_st_bad_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto path = write_sample(dir / "x.safetensors");
  auto good = read_bytes(path);

  SECTION("truncated data") {
    write_bytes(path, good.substr(0, good.size() - 7));
    CHECK_THROWS_WITH(read_safetensors(path),
                      Catch::Contains(path) && Catch::Contains("truncated"));
  }
  SECTION("truncated header") {
    write_bytes(path, good.substr(0, 20));
    CHECK_THROWS_WITH(read_safetensors(path), Catch::Contains("truncated"));
  }
  SECTION("a flipped bit in the data") {
    auto bad = good;
    bad[bad.size() - 3] ^= 0x10;
    write_bytes(path, bad);
    CHECK_THROWS_WITH(read_safetensors(path),
                      Catch::Contains("corrupted") && Catch::Contains("checksum"));
  }
  SECTION("a header that is not JSON") {
    auto bad = good;
    bad[9] = '#';
    write_bytes(path, bad);
    CHECK_THROWS_WITH(read_safetensors(path), Catch::Contains("not valid JSON"));
  }
  SECTION("an empty file") {
    write_bytes(path, "");
    CHECK_THROWS_WITH(read_safetensors(path), Catch::Contains("truncated"));
  }
  SECTION("a missing file") {
    CHECK_THROWS_WITH(read_safetensors((dir / "nope").string()), Catch::Contains("cannot open"));
  }
  fs::remove_all(dir);
}
