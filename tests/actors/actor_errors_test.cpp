#include <catch2/catch.hpp>

#include <caf/all.hpp>

#include <stdexcept>
#include <string>

#include "actors/actor_errors.hpp"

namespace {

// Throws at its start, or at its first message when `at_start` is false.
caf::behavior thrower(caf::event_based_actor* self, bool at_start) {
  self->set_exception_handler(merak::actors::exception_reason);
  if (at_start) throw std::runtime_error("s2 codec: sketch rows r=33 must be in 1..32");
  return {[](int) -> int { throw std::runtime_error("bucket 3 failed"); }};
}

// The exit reason of a thrower, as the coordinator reports it.
std::string reason_of(caf::actor_system& sys, bool at_start) {
  caf::scoped_actor self{sys};
  auto a = sys.spawn(thrower, at_start);
  self->monitor(a);
  if (!at_start) self->send(a, 1);
  std::string text;
  self->receive([&](const caf::down_msg& dm) { text = merak::actors::reason_text(sys, dm.reason); },
                caf::after(std::chrono::seconds(10)) >> [&] { text = "timeout"; });
  return text;
}

}  // namespace

TEST_CASE("an exception ends an actor with its message as the exit reason", "[actors]") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  CHECK(reason_of(sys, true) == "s2 codec: sketch rows r=33 must be in 1..32");
  CHECK(reason_of(sys, false) == "bucket 3 failed");
  // Other reasons are CAF's rendering.
  CHECK(merak::actors::reason_text(sys, caf::make_error(caf::sec::request_timeout)) ==
        sys.render(caf::make_error(caf::sec::request_timeout)));
}
