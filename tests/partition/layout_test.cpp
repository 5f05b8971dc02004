#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "partition/layout.hpp"

using namespace merak;
using namespace merak::partition;

TEST_CASE("a layout splits the batch into dp x micro-batches and names a bad flag", "[layout]") {
  layout l;
  l.dp = 2, l.tp = 2, l.pp = 3, l.micro_batches = 4;
  CHECK(l.actors() == 12);
  CHECK(l.micro_batch_rows(16) == 2);
  l.validate(16);
  CHECK_THROWS_WITH(l.validate(12),
                    Catch::Contains("--batch 12 does not split into --dp 2 x --micro-batches 4"));
  auto bad = [](auto set, const char* flag) {
    layout x;
    set(x);
    CHECK_THROWS_WITH(x.validate(8), Catch::Contains(flag));
  };
  bad([](layout& x) { x.dp = 0; }, "--dp must be at least 1");
  bad([](layout& x) { x.tp = -1; }, "--tp must be at least 1");
  bad([](layout& x) { x.pp = 0; }, "--pp must be at least 1");
  bad([](layout& x) { x.micro_batches = 0; }, "--micro-batches must be at least 1");
  bad([](layout& x) { x.tp_overlap = 3; }, "--tp-overlap must be 0, 1 or 2");
  l.schedule = schedule_kind::shifted;
  l.recompute = recompute_kind::stage_aware;
  CHECK(l.str() == "dp=2 tp=2 pp=3 m=4 shifted recompute=stage-aware tp-overlap=0");
}
