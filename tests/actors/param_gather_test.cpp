// The progress a reducer's thread reports and a stage's thread waits on
// (actors/param_gather.hpp): waits return once the work is done, and throw
// naming the cause once it failed, whichever thread gets there first.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "actors/param_gather.hpp"
#include "core/error.hpp"

using namespace merak::actors;
using namespace std::chrono_literals;

TEST_CASE("a failed all-gather or reduction wakes its waiter with the cause", "[gather]") {
  count_progress g("all-gather of parameter values");
  std::thread a([&] {
    std::this_thread::sleep_for(20ms);
    g.finish_one();
    std::this_thread::sleep_for(20ms);
    g.fail("reducer actor (dp=1, pp=0, tp=0) ended");
  });
  g.wait_for(1);  // returns once the first finished
  CHECK_THROWS_WITH(g.wait_for(2), Catch::Contains("all-gather of parameter values") &&
                                       Catch::Contains("reducer actor (dp=1, pp=0, tp=0) ended"));
  a.join();
  count_progress r;
  r.finish_one();
  r.wait_for(1);  // done already: no wait
  std::thread b([&] {
    std::this_thread::sleep_for(20ms);
    r.fail("peer 1 closed the connection");
  });
  CHECK_THROWS_WITH(r.wait_for(2), Catch::Contains("gradient reduction") &&
                                       Catch::Contains("peer 1 closed the connection"));
  b.join();
  r.wait_for(1);  // what finished before the failure still counts
}
