#include <catch2/catch.hpp>

#include <array>

#include "core/error.hpp"
#include "partition/placement.hpp"

using namespace merak::partition;

TEST_CASE("the default placement fills processes in layout order, TP rank fastest", "[placement]") {
  // dp2 x pp2 x tp2 over 2 processes: one replica per process.
  auto p = default_placement(2, 2, 2, 2);
  CHECK(p.str() == "0,0,0,0,1,1,1,1");
  CHECK(p.rank(1, 0, 1) == 1);
  CHECK(p.replica_on(0, 0));
  CHECK(p.replica_on(1, 1));
  CHECK(tp_group_spread(p, 1, 1) == group_spread::one_process);
  CHECK(dp_group_spread(p, 1, 0) == group_spread::one_per_process);
  // Over 8: one actor per process, TP shards on adjacent ranks.
  auto q = default_placement(2, 2, 2, 8);
  CHECK(q.str() == "0,1,2,3,4,5,6,7");
  CHECK(q.rank(0, 1, 0) == 2);
  CHECK(tp_group_spread(q, 0, 1) == group_spread::one_per_process);
  validate_placement(q);
  // Uneven: 3 stages over 2 processes.
  CHECK(default_placement(1, 3, 1, 2).str() == "0,0,1");
  CHECK(default_placement(1, 4, 1, 1).single_process());
  CHECK(default_placement(1, 4, 1, 2).actors_of(1) == std::vector<int>{2, 3});
}

TEST_CASE("a placement that splits a group unevenly is refused naming the group", "[placement]") {
  // tp4 over 2 processes: each TP group half on each process.
  auto p = default_placement(1, 1, 4, 2);
  CHECK_THROWS_WITH(validate_placement(p),
                    Catch::Contains("TP shards of replica 0 stage 0 on processes [0, 0, 1, 1]"));
  // Replicas 0 and 1 of stage 0 on process 0, replica 2 on process 1.
  auto q = parse_placement("0,0,1", 3, 1, 1, 2);
  CHECK_THROWS_WITH(validate_placement(q), Catch::Contains("replicas of stage 0 shard 0"));
}

TEST_CASE("placement text is checked entry by entry", "[placement]") {
  CHECK(parse_placement("1,0", 1, 2, 1, 2).rank(0, 0, 0) == 1);
  CHECK_THROWS_WITH(parse_placement("0,2", 1, 2, 1, 2),
                    Catch::Contains("entry 2 ('2') is not a process rank in [0, 2)"));
  CHECK_THROWS_WITH(parse_placement("0,x", 1, 2, 1, 2), Catch::Contains("entry 2 ('x')"));
  CHECK_THROWS_WITH(parse_placement("0,,1", 1, 3, 1, 2), Catch::Contains("entry 2 ('')"));
  CHECK_THROWS_WITH(parse_placement("0,1,1", 1, 2, 1, 2),
                    Catch::Contains("lists 3 ranks but the layout dp=1 x pp=2 x tp=1 has 2"));
  CHECK_THROWS_WITH(parse_placement("0,0", 1, 2, 1, 2),
                    Catch::Contains("gives process 1 no actor"));
  CHECK_THROWS_WITH(default_placement(1, 2, 1, 3),
                    Catch::Contains("3 processes but the layout dp=1 x pp=2 x tp=1 has only 2"));
}

TEST_CASE("dp follows the processes when it divides into pp x tp", "[placement]") {
  CHECK(derive_dp(8, 2, 2) == 2);
  CHECK(derive_dp(2, 1, 1) == 2);
  CHECK(derive_dp(2, 2, 1) == 1);
  CHECK(derive_dp(2, 4, 1) == 1);  // several stages per process
  CHECK(derive_dp(6, 4, 1) == 1);
  CHECK(derive_dp(1, 1, 1) == 1);
}

TEST_CASE("an actor's coordinate and its layout index are inverses", "[placement]") {
  for (auto [dp, pp, tp] :
       {std::array{1, 1, 1}, std::array{2, 3, 4}, std::array{3, 1, 2}, std::array{1, 5, 1}}) {
    auto p = default_placement(dp, pp, tp, 1);
    int i = 0;
    // Layout order: TP rank fastest, then stage, then replica.
    for (int d = 0; d < dp; ++d)
      for (int s = 0; s < pp; ++s)
        for (int t = 0; t < tp; ++t, ++i) {
          const actor_coordinate c = p.coordinate(i);
          CHECK(c == actor_coordinate{d, s, t});
          CHECK(p.index(c) == i);
        }
    CHECK(i == p.actors());
  }
  CHECK(default_placement(2, 3, 4, 1).coordinate(17).str() == "dp=1, pp=1, tp=1");
}
