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
