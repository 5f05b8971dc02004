#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "comm/inproc.hpp"
#include "comm_test_util.hpp"
#include "core/error.hpp"

using namespace merak::comm;
using namespace std::chrono_literals;

TEST_CASE("an in-process send reaches a receive posted before or after it", "[comm][inproc]") {
  auto g = make_inproc_group(2);
  int a = 7, b = 0;
  auto early = g[1]->irecv(0, 5, &b, sizeof b);
  g[0]->isend(1, 5, &a, sizeof a).wait();
  early.wait();
  CHECK(b == 7);
  a = 9;
  g[0]->isend(1, 5, &a, sizeof a).wait();  // buffered: no receive yet
  a = 0;                                   // the send buffer is free at once
  g[1]->irecv(0, 5, &b, sizeof b).wait();
  CHECK(b == 9);
  CHECK(g[0]->bytes_sent() == 2 * sizeof a);
  CHECK(g[1]->bytes_sent() == 0);
}

TEST_CASE("in-process messages with the same source and tag arrive in send order, tags apart",
          "[comm][inproc]") {
  auto g = make_inproc_group(2);
  for (int i = 0; i < 5; ++i) g[0]->isend(1, 1, &i, sizeof i).wait();
  int x = 42;
  g[0]->isend(1, 2, &x, sizeof x).wait();
  int y = 0;
  g[1]->irecv(0, 2, &y, sizeof y).wait();
  CHECK(y == 42);
  for (int i = 0; i < 5; ++i) {
    int v = -1;
    g[1]->irecv(0, 1, &v, sizeof v).wait();
    CHECK(v == i);
  }
}

TEST_CASE("an in-process receive of the wrong size fails naming peer and tag", "[comm][inproc]") {
  auto g = make_inproc_group(2);
  double d = 1;
  g[0]->isend(1, 3, &d, sizeof d).wait();
  float f;
  CHECK_THROWS_WITH(g[1]->irecv(0, 3, &f, sizeof f).wait(), Catch::Contains("peer 0") &&
                                                                Catch::Contains("tag 3") &&
                                                                Catch::Contains("8 bytes"));
}

TEST_CASE("an in-process receive that nobody matches times out naming rank, peer and tag",
          "[comm][inproc]") {
  auto g = make_inproc_group(3, 150ms);
  int v;
  auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(g[1]->irecv(2, 77, &v, sizeof v).wait(),
                    Catch::Contains("rank 1") && Catch::Contains("peer 2") &&
                        Catch::Contains("tag 77") && Catch::Contains("timed out"));
  auto dt = std::chrono::steady_clock::now() - t0;
  CHECK(dt >= 140ms);
  CHECK(dt < 2s);
  // The withdrawn receive no longer matches: a later message goes to a new one.
  int w = 5, u = 0;
  g[2]->isend(1, 77, &w, sizeof w).wait();
  g[1]->irecv(2, 77, &u, sizeof u).wait();
  CHECK(u == 5);
}

TEST_CASE("a receive from a closed in-process endpoint fails at once naming it", "[comm][inproc]") {
  auto g = make_inproc_group(2, 10s);
  int v = 0;
  auto c = g[0]->irecv(1, 4, &v, sizeof v);
  auto t0 = std::chrono::steady_clock::now();
  std::thread closer([&] {
    std::this_thread::sleep_for(50ms);
    g[1].reset();
  });
  CHECK_THROWS_WITH(c.wait(), Catch::Contains("peer 1") && Catch::Contains("closed"));
  closer.join();
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
}

TEST_CASE("make_inproc_group refuses an empty group", "[comm][inproc]") {
  CHECK_THROWS_AS(make_inproc_group(0), merak::error);
}
