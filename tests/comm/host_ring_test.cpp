#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <unistd.h>

#include "comm/host_ring.hpp"
#include "core/shared_memory.hpp"

using namespace merak::comm;

namespace {

std::shared_ptr<void> zeroed_region(size_t capacity) {
  const size_t n = host_ring::region_bytes(capacity);
  void* p = std::aligned_alloc(host_ring::kalign, n);
  std::memset(p, 0, n);
  return std::shared_ptr<void>(p, std::free);
}

}  // namespace

TEST_CASE("a host ring hands out blocks until the receiver frees them", "[host_ring]") {
  auto mem = zeroed_region(1024);
  host_ring producer(mem.get(), 1024, mem), consumer(mem.get(), 1024, mem);
  CHECK(host_ring::block_bytes(1) == 64);
  CHECK(host_ring::block_bytes(64) == 64);
  CHECK(host_ring::block_bytes(65) == 128);

  auto a = producer.reserve(300);  // 320 bytes
  auto b = producer.reserve(500);  // 512: ends at 832
  REQUIRE(a);
  REQUIRE(b);
  CHECK(*a == 0);
  CHECK(*b == 320);
  CHECK_FALSE(producer.reserve(256));   // 832 + 256 does not fit before the end, next lap is taken
  CHECK_FALSE(producer.reserve(2000));  // never fits
  std::memset(producer.at(*a), 7, 300);
  CHECK(std::to_integer<int>(consumer.at(*a)[299]) == 7);

  consumer.release(*a, 300);  // [0, 320) free: a block wrapping from 832 goes to the next lap
  auto c = producer.reserve(256);
  REQUIRE(c);
  CHECK(*c == 1024);
  CHECK(producer.at(*c) == producer.at(0));
  CHECK(producer.holds(*c, 256));
  CHECK_FALSE(producer.holds(*c + 900, 256));  // would run past the end
  CHECK_FALSE(producer.holds(*c + 1, 16));     // not a block boundary
  // b is unread, and the skipped [832, 1024) counts until it is: 1280 + 128 - 320 > 1024.
  CHECK_FALSE(producer.reserve(128));
  consumer.release(*b, 500);
  auto d = producer.reserve(128);
  REQUIRE(d);
  CHECK(*d == 1280);
  consumer.release(*c, 256);
  consumer.release(*d, 128);
  // Nothing unread: a whole ring fits, from the next lap's start.
  auto e = producer.reserve(1024);
  REQUIRE(e);
  CHECK(*e == 2048);
  CHECK_FALSE(producer.reserve(64));
}

TEST_CASE("shared memory too large for its file system is refused when it is made", "[host_ring]") {
  // A ring the host's /dev/shm has no room for must fail at creation (the
  // channel then goes without it), not with SIGBUS on a later write.
  const std::string name = "/merak-test-ring-" + std::to_string(::getpid());
  CHECK_THROWS_WITH(merak::shared_region::create(name, size_t{1} << 50),
                    Catch::Contains("shared memory '" + name + "': cannot reserve"));
  CHECK_THROWS_WITH(merak::shared_region::open(name, 64), Catch::Contains("cannot open it"));
}
