#include <catch2/catch.hpp>

#include "model/gpt.hpp"
#include "partition/recompute.hpp"
#include "partition/stages.hpp"

using namespace merak;
using namespace merak::partition;

namespace {

std::vector<stage_memory> four_stages(const model::graph& g, std::vector<int>& bounds) {
  bounds = balanced_stages(g, 4);
  std::vector<stage_memory> m;
  for (int s = 0; s < 4; ++s)
    m.push_back(describe_stage(g, s, bounds[s], bounds[s + 1], 1024, 4 - s));
  return m;
}

}  // namespace

TEST_CASE("stage-aware ratios follow the spec's formula", "[recompute]") {
  auto r = stage_aware_ratios(4, 0.75);
  REQUIRE(r.size() == 4);
  CHECK(r[0] == Approx(0.75));
  CHECK(r[1] == Approx(0.625));
  CHECK(r[2] == Approx(0.25));
  CHECK(r[3] == 0.0);
  // (1 - r_s)(p - 1 - s) is constant where not clamped.
  for (int s = 0; s < 3; ++s) CHECK((1 - r[s]) * (3 - s) == Approx(0.75));
  CHECK(stage_aware_ratios(4, 0.2)[2] == 0.0);  // clamped
}

TEST_CASE("the budget plan is the least recomputation that fits every stage", "[recompute]") {
  auto g = model::build_gpt({.vocab = 256, .max_seq = 64, .layers = 8, .dim = 64, .heads = 4});
  std::vector<int> bounds;
  auto mem = four_stages(g, bounds);
  int64_t none = 0;
  for (auto& m : mem) none = std::max(none, stage_bytes(m, 0));
  for (double frac : {1.0, 0.8, 0.6}) {
    int64_t budget = int64_t(double(none) * frac);
    auto plan = plan_for_budget(mem, budget);
    for (size_t s = 0; s < mem.size(); ++s) {
      INFO("budget " << budget << " stage " << s);
      CHECK(plan.bytes[s] <= budget);
      for (int k = 0; k < plan.segments[s]; ++k) CHECK(stage_bytes(mem[s], k) > budget);
    }
  }
  // Stage 0 holds the most micro-batches: it recomputes at least as much as the last.
  auto tight = plan_for_budget(mem, int64_t(double(none) * 0.6));
  CHECK(tight.segments.front() >= tight.segments.back());
}

TEST_CASE("an impossible budget names the stage and the bytes", "[recompute]") {
  auto g = model::build_gpt({.vocab = 256, .max_seq = 64, .layers = 8, .dim = 64, .heads = 4});
  std::vector<int> bounds;
  auto mem = four_stages(g, bounds);
  CHECK_THROWS_WITH(plan_for_budget(mem, 1000),
                    Catch::Contains("stage 0 needs") && Catch::Contains("--memory-budget 1000"));
}

TEST_CASE("checkpointing segments lowers a stage's activation memory", "[recompute]") {
  auto g = model::build_gpt({.vocab = 256, .max_seq = 64, .layers = 8, .dim = 64, .heads = 4});
  std::vector<int> bounds;
  auto mem = four_stages(g, bounds);
  auto& m = mem[0];
  CHECK(stage_bytes(m, int(m.stash_bytes.size()) - 1) < stage_bytes(m, 0));
  auto plan = plan_stage_aware(mem, 0.75);
  CHECK(plan.segments[3] == 0);
  CHECK(plan.segments[0] == int(double(m.stash_bytes.size()) * 0.75));
}

TEST_CASE("a budget plan takes selective recomputation before recomputing segments",
          "[recompute]") {
  stage_memory m;
  m.weights_bytes = 1000;
  m.segment_nodes = {3, 3, 3};
  m.stash_bytes = {100, 100, 100};
  m.core_bytes = {40, 40, 40};
  m.checkpoint_bytes = {10, 10, 10};
  m.input_bytes = 10;
  m.in_flight = 2;
  // Kept: 2 x (10 + 300) = 620; selective: 2 x (10 + 180) = 380.
  CHECK(stage_bytes(m, 0) == 1000 + 620);
  CHECK(stage_bytes(m, 0, true) == 1000 + 380);
  // One segment recomputed, the rest selective: 2 x (10 + 120 + 10) + 100;
  // two: 2 x (10 + 60 + 10 + 10) + 100 (each recomputed segment's input kept).
  CHECK(stage_bytes(m, 1, true) == 1000 + 280 + 100);
  CHECK(stage_bytes(m, 2, true) == 1000 + 180 + 100);
  CHECK(stage_bytes(m, 2) == 1000 + 260 + 100);
  auto plan = [&](int64_t budget) { return plan_for_budget({m}, budget, true); };
  CHECK((plan(1620).segments[0] == 0 && !plan(1620).selective[0]));  // nothing needed
  CHECK((plan(1500).segments[0] == 0 && plan(1500).selective[0]));   // selective suffices
  CHECK((plan(1379).segments[0] == 2 && plan(1379).selective[0]));
  CHECK(plan(1500).bytes[0] == 1380);
  // Without selective, the same budget recomputes two segments.
  CHECK(plan_for_budget({m}, 1500, false).segments[0] == 2);
  CHECK(plan(1500).str().find("the rest selective") != std::string::npos);
}
