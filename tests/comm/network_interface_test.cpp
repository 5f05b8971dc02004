#include <catch2/catch.hpp>

#include "comm/network_interface.hpp"

using namespace merak::comm;

TEST_CASE("the interface that holds an address is found by name", "[comm][network]") {
  CHECK(interface_of("127.0.0.1") == "lo");
  CHECK(interface_of("192.0.2.99") == "");  // TEST-NET-1: no interface here
  CHECK(interface_of("not an address") == "");
}
