#include <catch2/catch.hpp>

#include <string>

#include "core/checksum.hpp"
#include "core/rng.hpp"

using namespace merak;

TEST_CASE("crc32c matches the standard check value", "[core]") {
  std::string s = "123456789";
  CHECK(crc32c(s.data(), s.size()) == 0xE3069283u);
  CHECK(crc32c("", 0) == 0u);
}

TEST_CASE("crc32c can be computed in pieces", "[core]") {
  std::string s = "the quick brown fox jumps over the lazy dog, twice over";
  uint32_t whole = crc32c(s.data(), s.size());
  uint32_t part = crc32c(s.data() + 13, s.size() - 13, crc32c(s.data(), 13));
  CHECK(part == whole);
}

TEST_CASE("rng streams are reproducible and positioned", "[core]") {
  rng a(42, 7), b(42, 7), c(42, 8);
  uint64_t x = a.next_u64();
  CHECK(x == b.next_u64());
  CHECK(x != c.next_u64());
  rng d(42, 7, 1);
  CHECK(d.next_u64() == a.next_u64());
  for (int i = 0; i < 1000; ++i) {
    auto v = a.below(10);
    REQUIRE(v < 10);
  }
}
