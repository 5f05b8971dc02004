#include <catch2/catch.hpp>

#include "job/heartbeat.hpp"

using namespace merak::job;
using namespace std::chrono_literals;

TEST_CASE("a peer silent past the limit is overdue, the longest silent first", "[heartbeat]") {
  const auto t0 = heartbeats::clock::time_point{} + 100s;
  heartbeats h(3, 5000ms, t0);
  CHECK(h.overdue(t0 + 5s) == -1);  // exactly the limit is not over it
  h.heard(0, t0 + 4s);
  h.heard(2, t0 + 2s);
  CHECK(h.overdue(t0 + 6s) == 1);  // silent 6 s
  CHECK(h.silent(1, t0 + 6s) == 6000ms);
  h.heard(1, t0 + 6s);
  CHECK(h.overdue(t0 + 6s) == -1);
  CHECK(h.overdue(t0 + 7500ms) == 2);  // silent 5.5 s
  CHECK(h.overdue(t0 + 20s) == 2);     // 0 (4 s) and 1 (6 s) heard later than 2
}
