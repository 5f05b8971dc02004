#include <catch2/catch.hpp>

#include <memory>
#include <thread>
#include <vector>

#include "comm/collectives.hpp"
#include "comm/group.hpp"
#include "comm/inproc.hpp"
#include "core/error.hpp"

using namespace merak::comm;

TEST_CASE("a group view over ranks 1 and 3 of four all-reduces among its members only", "[group]") {
  auto under = make_inproc_group(4, std::chrono::milliseconds(10000));
  std::vector<std::shared_ptr<transport>> world(under.size());
  for (size_t r = 0; r < under.size(); ++r) world[r] = std::move(under[r]);
  const std::vector<int> members{3, 1};  // group rank 0 is world rank 3
  std::vector<std::vector<float>> out(2);
  std::vector<int> ranks(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int k = 0; k < 2; ++k)
    threads.emplace_back([&, k] {
      try {
        auto g = make_group_view(world[size_t(members[size_t(k)])], members);
        ranks[size_t(k)] = g->rank();
        std::vector<float> x{float(members[size_t(k)]), 10.0f * float(k + 1)};
        allreduce_sum(*g, x, 7);
        out[size_t(k)] = x;
        CHECK(g->size() == 2);
        CHECK(g->bytes_sent() > 0);
      } catch (const std::exception& e) {
        errors[size_t(k)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  REQUIRE(errors == std::vector<std::string>{"", ""});
  CHECK(ranks == std::vector<int>{0, 1});
  for (auto& x : out) CHECK(x == std::vector<float>{4.0f, 30.0f});
  // The other ranks of the transport carried nothing.
  CHECK(world[0]->bytes_sent() == 0);
  CHECK(world[2]->bytes_sent() == 0);
}

TEST_CASE("a group view refuses members that are not distinct ranks, or lack this rank",
          "[group]") {
  auto under = make_inproc_group(3);
  std::shared_ptr<transport> t0 = std::move(under[0]);
  CHECK_THROWS_WITH(make_group_view(t0, {0, 0}), Catch::Contains("not distinct ranks"));
  CHECK_THROWS_WITH(make_group_view(t0, {0, 3}), Catch::Contains("not distinct ranks"));
  CHECK_THROWS_WITH(make_group_view(t0, {1, 2}), Catch::Contains("rank 0 is not a member"));
  CHECK(make_group_view(t0, {2, 0})->rank() == 1);
}
