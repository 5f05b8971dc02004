#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "partition/tie_settlement.hpp"

using namespace merak;
using namespace merak::partition;

namespace {

model::tensor filled(float v, int64_t n = 4) {
  model::tensor t({n});
  for (int64_t i = 0; i < n; ++i) t.f32()[i] = v;
  return t;
}

}  // namespace

TEST_CASE("the owner sums its holders' gradients in stage order and sends the sum back", "[ties]") {
  const tied_param wte{"wte", 0, {0, 2, 3}};
  tie_settlement owner(0, {wte});
  model::tensor g = filled(1);
  auto grad = [&](const std::string& name) -> model::tensor& {
    REQUIRE(name == "wte");
    return g;
  };
  CHECK(owner.owns("wte"));
  // A holder's gradient may arrive before the owner's own is final.
  owner.holder_gradient("wte", 3, filled(100));
  CHECK(owner.settle(grad).empty());  // not begun
  CHECK(owner.begin().empty());       // the owner sends nothing first
  CHECK(owner.settle(grad).empty());  // stage 2 has not reported
  CHECK_FALSE(owner.finished());
  owner.holder_gradient("wte", 2, filled(10));
  auto sums = owner.settle(grad);
  REQUIRE(sums.size() == 2);
  CHECK(sums[0].to == 2);
  CHECK(sums[1].to == 3);
  CHECK(g.f32()[0] == 111.0f);
  CHECK(owner.finished());
  CHECK_FALSE(owner.finished());  // once per step
  // The next step starts clean.
  g = filled(2);
  CHECK(owner.begin().empty());
  CHECK_FALSE(owner.finished());
  owner.holder_gradient("wte", 2, filled(1));
  owner.holder_gradient("wte", 3, filled(1));
  CHECK(owner.settle(grad).size() == 2);
  CHECK(g.f32()[3] == 4.0f);
  CHECK(owner.finished());
}

TEST_CASE("a holder sends its gradient to the owner and is done when the sum is back", "[ties]") {
  tie_settlement holder(2, {{"wte", 0, {0, 2}}});
  CHECK_FALSE(holder.owns("wte"));
  CHECK_THROWS_AS(holder.owner_sum("wte"), error);  // before its own gradient went out
  auto out = holder.begin();
  REQUIRE(out.size() == 1);
  CHECK(out[0].name == "wte");
  CHECK(out[0].to == 0);
  CHECK_FALSE(holder.finished());
  holder.owner_sum("wte");
  CHECK(holder.finished());
  // A stage with no ties is done as soon as it begins.
  tie_settlement none(1, {});
  CHECK(none.begin().empty());
  CHECK(none.finished());
}

TEST_CASE("misrouted tied gradients are refused by name", "[ties]") {
  tie_settlement owner(0, {{"wte", 0, {0, 2}}});
  CHECK_THROWS_AS(owner.holder_gradient("wpe", 2, filled(1)), error);  // not a tie
  CHECK_THROWS_AS(owner.holder_gradient("wte", 1, filled(1)), error);  // not a holder
  owner.holder_gradient("wte", 2, filled(1));
  CHECK_THROWS_AS(owner.holder_gradient("wte", 2, filled(1)), error);  // twice
  tie_settlement holder(2, {{"wte", 0, {0, 2}}});
  CHECK_THROWS_AS(holder.holder_gradient("wte", 0, filled(1)), error);  // not the owner
  CHECK_THROWS_AS(tie_settlement(1, {{"wte", 0, {0, 2}}}), error);      // does not hold it
  // A sum of the wrong size is caught before it is added.
  model::tensor g = filled(0, 8);
  owner.begin();
  CHECK_THROWS_AS(owner.settle([&](const std::string&) -> model::tensor& { return g; }), error);
}
