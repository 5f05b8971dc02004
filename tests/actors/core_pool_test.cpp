// The accounting behind lending idle cores to a computing stage.
#include <algorithm>
#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "actors/core_pool.hpp"

#include <unistd.h>

#include <memory>
#include <string>

#include "core/shared_memory.hpp"

using merak::actors::core_pool;

TEST_CASE("a stage borrows only the cores of stages that are idle", "[core_pool]") {
  core_pool pool(2, 2, 1);  // two stages of one core each
  pool.wake(0);
  CHECK_FALSE(pool.lent_away(1));
  CHECK(pool.borrow(1) == 1);  // stage 1 idle: its core is lent
  CHECK(pool.free_cores() == 0);
  CHECK(pool.lent_away(1));        // so stage 1 must not poll on it
  CHECK_FALSE(pool.lent_away(0));  // the borrower is busy
  pool.give(1);
  pool.wake(1);  // work handed to stage 1: its core is taken back
  CHECK(pool.borrow(1) == 0);
  pool.wake(1);  // twice counts once
  CHECK(pool.free_cores() == 0);
  pool.sleep(1);
  pool.sleep(1);  // and so does going idle
  CHECK(pool.free_cores() == 1);
  CHECK(pool.borrow(3) == 1);  // never more than are idle
  pool.give(1);
  pool.sleep(0);
  CHECK(pool.free_cores() == 2);
}

TEST_CASE("mid-op, a borrower takes cores that went idle and returns wanted ones", "[core_pool]") {
  core_pool pool(3, 3, 1);
  pool.wake(0);
  pool.wake(1);
  int held = pool.borrow(2);  // stage 0 starts an op: only stage 2 is idle
  CHECK(held == 1);
  CHECK(pool.rebalance(held, 2) == 1);  // nothing changed
  pool.sleep(1);                        // stage 1 runs out of work mid-op
  held = pool.rebalance(held, 2);
  CHECK(held == 2);
  CHECK(pool.free_cores() == 0);
  CHECK(pool.rebalance(held, 2) == 2);  // never more than max
  pool.wake(2);                         // work reaches a lender
  CHECK(pool.free_cores() == -1);
  held = pool.rebalance(held, 2);
  CHECK(held == 1);  // its core goes back at the next node
  CHECK(pool.free_cores() == 0);
  pool.wake(1);
  held = pool.rebalance(held, 2);
  CHECK(held == 0);
  CHECK(pool.free_cores() == 0);
  CHECK(pool.rebalance(held, 2) == 0);  // nothing held, nothing idle
  pool.sleep(0);
  pool.sleep(1);
  pool.sleep(2);
  CHECK(pool.free_cores() == 3);
}

TEST_CASE("with more stages than cores nothing is lent", "[core_pool]") {
  core_pool pool(2, 4, 1);
  for (int i = 0; i < 4; ++i) pool.wake(i);
  CHECK(pool.free_cores() == -2);
  CHECK(pool.borrow(1) == 0);
  for (int i = 1; i < 4; ++i) pool.sleep(i);
  CHECK(pool.borrow(2) == 1);
}

TEST_CASE("concurrent stages leave the count balanced", "[core_pool]") {
  const int stages = 4;
  core_pool pool(3, stages, 1);
  std::vector<std::thread> threads;
  std::vector<int> max_seen(stages, 0);
  for (int s = 0; s < stages; ++s)
    threads.emplace_back([&, s] {
      for (int i = 0; i < 20000; ++i) {
        pool.wake(s);
        int got = pool.borrow(2);
        got = pool.rebalance(got, 2);  // mid-op
        max_seen[s] = std::max(max_seen[s], got);
        pool.give(got);
        if (i % 3 == 0) pool.sleep(s);
      }
      pool.sleep(s);
    });
  for (auto& t : threads) t.join();
  CHECK(pool.free_cores() == 3);
  for (int m : max_seen) CHECK(m <= 2);
}

TEST_CASE("pools over one shared region lend cores between processes' stages", "[core_pool]") {
  const std::string name = "/merak-test-cores-" + std::to_string(::getpid());
  auto created = std::make_shared<merak::shared_region>(
      merak::shared_region::create(name, sizeof(merak::actors::core_pool_state)));
  auto* st = new (created->data()) merak::actors::core_pool_state();
  st->init(2, 2, 1);  // a host of 2 cores, a stage of 1 core in each of two processes
  auto opened = std::make_shared<merak::shared_region>(
      merak::shared_region::open(name, sizeof(merak::actors::core_pool_state)));
  created->unlink();
  // Each "process" maps the counters at its own address.
  core_pool a(static_cast<merak::actors::core_pool_state*>(created->data()), created);
  core_pool b(static_cast<merak::actors::core_pool_state*>(opened->data()), opened);
  a.wake(0);                // stage 0 (process A) computes; stage 1 (process B) idles
  CHECK(a.borrow(1) == 1);  // so A borrows B's core
  CHECK(b.free_cores() == 0);
  CHECK(b.lent_away(1));  // and B sees its core lent
  b.wake(1);              // work reaches stage 1: oversubscribed until A gives back
  CHECK(a.rebalance(1, 1) == 0);
  CHECK(b.free_cores() == 0);
  b.sleep(1);
  a.sleep(0);
  CHECK(a.free_cores() == 2);
  CHECK_THROWS_WITH(merak::shared_region::open(name, 8), Catch::Contains("cannot open it"));
}
