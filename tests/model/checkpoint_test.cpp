// safetensors files: round trip, and every kind of damage is detected.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>

#include "core/checksum.hpp"
#include "core/error.hpp"
#include "core/files.hpp"
#include "model/checkpoint.hpp"
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

namespace {

// A safetensors file built by hand around `tensors_json` (the header's
// tensor entries, without the closing brace) and `data`, with a valid merak
// checksum: what a hostile or buggy writer could produce.
std::string hand_made(const std::string& tensors_json, const std::string& data) {
  std::string h = "{" + tensors_json + (tensors_json.empty() ? "" : ",") +
                  "\"__metadata__\":{\"merak.crc32c\":\"v2:00000000\"}}";
  h.append((8 - h.size() % 8) % 8, ' ');
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = (uint64_t(h.size()) >> (8 * i)) & 0xFF;
  uint32_t c = crc32c(len, 8);
  c = crc32c(h.data(), h.size(), c);
  c = crc32c(data.data(), data.size(), c);
  const auto at = h.find("v2:") + 3;
  h.replace(at, 8, fmt::format("{:08x}", c));
  return std::string(reinterpret_cast<char*>(len), 8) + h + data;
}

}  // namespace

TEST_CASE("the checksum covers the header, and a file without one is refused", "[checkpoint]") {
  auto dir = fs::temp_directory_path() / ("merak_st_crc_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto path = write_sample(dir / "x.safetensors");
  auto good = read_bytes(path);
  // Pointing tensor b at a's bytes (same length, a header edit) is caught.
  auto bad = good;
  const auto at = bad.find("\"note\":\"hello\"");
  REQUIRE(at != std::string::npos);
  bad[at + 9] = 'j';
  write_bytes(path, bad);
  CHECK_THROWS_WITH(read_safetensors(path),
                    Catch::Contains("corrupted") && Catch::Contains("checksum"));
  // Without the checksum key nothing is believed.
  std::string plain = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
  std::string no_crc(8, '\0');
  no_crc[0] = char(plain.size());
  write_bytes(path, no_crc + plain + std::string(4, '\0'));
  CHECK_THROWS_WITH(read_safetensors(path), Catch::Contains("has no merak.crc32c checksum") &&
                                                Catch::Contains("--skip-checksum"));
  // --skip-checksum loads both; the other checks still run.
  merak::set_verify_checksums(false);
  CHECK(read_safetensors(path).tensors.at("a").f32()[0] == 0.0f);
  write_bytes(path, bad);
  CHECK(read_safetensors(path).metadata.at("note") == "hjllo");
  write_bytes(path, no_crc + plain + std::string(3, '\0'));
  CHECK_THROWS_WITH(read_safetensors(path), Catch::Contains("x.safetensors"));
  merak::set_verify_checksums(true);
  // A hand-made file with a valid checksum still has its fields checked.
  write_bytes(path, hand_made("\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}",
                              std::string(4, '\0')));
  CHECK(read_safetensors(path).tensors.at("a").f32()[0] == 0.0f);
  fs::remove_all(dir);
}

TEST_CASE("shapes are whole numbers checked against the file before any allocation",
          "[checkpoint]") {
  auto dir = fs::temp_directory_path() / ("merak_st_shape_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto path = (dir / "x.safetensors").string();
  struct c {
    std::string entry, message;
  };
  const c cases[] = {
      {"\"a\":{\"dtype\":\"F32\",\"shape\":[256.5],\"data_offsets\":[0,8]}",
       "shape entry 256.5 is not a whole number"},
      {"\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}",
       "shape entry -2 is not a whole number"},
      // 12 GB announced by 8 bytes of data: refused, not allocated.
      {"\"a\":{\"dtype\":\"F32\",\"shape\":[3000000000,1],\"data_offsets\":[0,8]}",
       "needs 12000000000 bytes but data_offsets span 8"},
      // An element count that overflows 64 bits.
      {"\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,8]}",
       "holds more than"},
  };
  for (const auto& t : cases) {
    INFO(t.entry);
    write_bytes(path, hand_made(t.entry, std::string(8, '\0')));
    CHECK_THROWS_WITH(read_safetensors(path), Catch::Contains(t.message));
  }
  fs::remove_all(dir);
}

TEST_CASE("non-finite weights are refused on load, naming the tensor", "[checkpoint]") {
  auto dir = fs::temp_directory_path() / ("merak_st_nan_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto a = test::random_tensor({2, 3}, 1);
  a.f32()[4] = std::numeric_limits<float>::quiet_NaN();
  const auto path = (dir / "x.safetensors").string();
  write_safetensors(path, {{"w", &a}}, {});
  CHECK_THROWS_WITH(read_safetensors(path),
                    Catch::Contains("tensor 'w'") && Catch::Contains("element 4 is nan"));
  fs::remove_all(dir);
}

TEST_CASE("a link planted at the temporary name is replaced, its target untouched",
          "[checkpoint]") {
  auto dir = fs::temp_directory_path() / ("merak_st_link_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto target = (dir / "precious").string();
  write_bytes(target, "keep me");
  const auto path = dir / "x.safetensors";
  fs::create_symlink(target, path.string() + ".tmp");
  write_sample(path);
  CHECK(read_bytes(target) == "keep me");
  CHECK(read_safetensors(path.string()).tensors.count("a") == 1);
  CHECK_FALSE(fs::exists(path.string() + ".tmp"));
  fs::remove_all(dir);
}

TEST_CASE("checkpoint counts are decimal counts, named when they are not", "[checkpoint]") {
  const metadata_map meta{{"merak.step", "12"},
                          {"merak.adam_t", "-3"},
                          {"merak.bad", "12abc"},
                          {"merak.empty", ""},
                          {"merak.big", "99999999999999999999"}};
  CHECK(metadata_count(meta, "merak.step", "ck") == 12);
  CHECK_THROWS_WITH(metadata_count(meta, "merak.adam_t", "ck"),
                    Catch::Contains("checkpoint 'ck': metadata merak.adam_t is '-3', not a count"));
  CHECK_THROWS_WITH(metadata_count(meta, "merak.bad", "ck"), Catch::Contains("'12abc'"));
  CHECK_THROWS_WITH(metadata_count(meta, "merak.empty", "ck"), Catch::Contains("''"));
  CHECK_THROWS_WITH(metadata_count(meta, "merak.big", "ck"), Catch::Contains("not a count"));
  CHECK_THROWS_WITH(metadata_count(meta, "merak.seed", "ck"),
                    Catch::Contains("metadata merak.seed is missing"));
}

TEST_CASE("run entries are told by merak's own names", "[checkpoint]") {
  CHECK(run_entry_of("step_00000002") == run_entry::checkpoint);
  CHECK(run_entry_of("step_123456789") == run_entry::checkpoint);
  CHECK(run_entry_of("step_00000002.old") == run_entry::moved_aside);
  CHECK(run_entry_of("step_00000002.tmp") == run_entry::assembling);
  for (const char* other : {"step_1.tmp", "step_0000000x.tmp", "step_00000002.tmp2",
                            "xstep_00000002", "step_", "latest", "config.toml", "notes.tmp"})
    CHECK(run_entry_of(other) == run_entry::none);
}

TEST_CASE("long or control-laden values are cut for messages", "[checkpoint]") {
  CHECK(shown_value("step_2") == "step_2");
  CHECK(shown_value("a\rb\x1b[31m") == "a?b?[31m");
  CHECK(shown_value(std::string(1000, 'x'), 80) == std::string(80, 'x') + "...(1000 bytes)");
}

TEST_CASE("latest is a small regular file and a CRLF line is read", "[checkpoint]") {
  auto dir = fs::temp_directory_path() / ("merak_latest_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string latest = (dir / "latest").string();
  write_bytes(latest, "step_00000004\r\n");
  CHECK(read_latest(dir.string()) == "step_00000004");
  CHECK(describe_run(dir.string()) == "latest: step 4");
  write_bytes(latest, std::string(5000, 'x'));
  CHECK_THROWS_WITH(read_latest(dir.string()),
                    Catch::Contains("is 5000 bytes, not a checkpoint name"));
  write_bytes(latest, "../elsewhere\n");
  CHECK_THROWS_WITH(read_latest(dir.string()), Catch::Contains("does not name a checkpoint"));
  fs::remove(latest);
  REQUIRE(::mkfifo(latest.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(read_latest(dir.string()),
                    Catch::Contains("is a FIFO, not a file naming a checkpoint"));
  CHECK(describe_run(dir.string()) == "a latest file");
  fs::remove_all(dir);
}

TEST_CASE("what a directory holds of a run, and what a new run may do there", "[checkpoint]") {
  auto dir = fs::temp_directory_path() / ("merak_run_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string d = dir.string();
  CHECK(describe_run(d).empty());
  CHECK(nothing_to_resume(d));
  fs::create_directories(dir / "step_00000001.tmp");
  write_bytes((dir / "notes.txt").string(), "mine");
  CHECK(describe_run(d).empty());  // a stale .tmp is swept, not a run
  CHECK(nothing_to_resume(d));
  write_bytes((dir / "config.toml").string(), "steps = 2\n");
  CHECK(describe_run(d).empty());  // a run stopped before its first checkpoint
  CHECK(nothing_to_resume(d));
  fs::create_directories(dir / "step_00000002");
  fs::create_directories(dir / "step_00000004");
  CHECK(describe_run(d) == "2 checkpoints (step_00000002 .. step_00000004), no latest");
  CHECK_FALSE(nothing_to_resume(d));
  CHECK(part_of_run(d, d));
  CHECK(part_of_run(d + "/", d));
  CHECK(part_of_run((dir / "step_00000002").string(), d + "/"));
  CHECK_FALSE(part_of_run(dir.parent_path().string(), d));
  sweep_assembling(d);
  CHECK_FALSE(fs::exists(dir / "step_00000001.tmp"));
  remove_run(d);
  CHECK(describe_run(d).empty());
  CHECK(fs::exists(dir / "notes.txt"));  // not merak's: kept
  fs::create_symlink(dir / "loop", dir / "loop");
  CHECK_THROWS_WITH(nothing_to_resume((dir / "loop").string()),
                    Catch::Contains("too many levels of symbolic links"));
  fs::remove_all(dir);
}
