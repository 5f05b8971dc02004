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
  // One segment recomputed, the rest selective: each micro-batch keeps
  // 10 + 120 + 10 (the input, the kept segments, the prefix's output); the
  // one in backward rebuilds segment 0 only after the others are done
  // (10 + 100 < 140): 140 + 140. Two: 10 + 60 + 10 + 10 = 90 kept (each
  // recomputed segment's input too), and rebuilding segment 1 the one in
  // backward holds 10 + 10 + 100 = 120: 90 + 120.
  CHECK(stage_bytes(m, 1, true) == 1000 + 140 + 140);
  CHECK(stage_bytes(m, 2, true) == 1000 + 90 + 120);
  CHECK(stage_bytes(m, 2) == 1000 + 130 + 130);
  CHECK(stage_bytes(m, 3) == 1000 + 30 + (10 + 20 + 100));  // inputs only; segment 2 rebuilt
  auto plan = [&](int64_t budget) { return plan_for_budget({m}, budget, true); };
  CHECK((plan(1620).segments[0] == 0 && !plan(1620).selective[0]));  // nothing needed
  CHECK((plan(1500).segments[0] == 0 && plan(1500).selective[0]));   // selective suffices
  CHECK((plan(1379).segments[0] == 1 && plan(1379).selective[0]));
  CHECK((plan(1279).segments[0] == 2 && plan(1279).selective[0]));
  CHECK(plan(1500).bytes[0] == 1380);
  // Without selective, the same budget recomputes a segment: 220 + 220.
  CHECK(plan_for_budget({m}, 1500, false).segments[0] == 1);
  CHECK(plan_for_budget({m}, 1500, false).bytes[0] == 1440);
  // A stage's output, handed on, is not held by the micro-batches that keep
  // their last segment, but by the forward until it hands it on; rebuilt,
  // it is held.
  auto handed = m;
  handed.output_bytes = 40;
  CHECK(stage_bytes(handed, 0) == 1000 + (310 - 40) + 310);
  CHECK(stage_bytes(handed, 3) == stage_bytes(m, 3));
  CHECK(plan(1500).str().find("the rest selective") != std::string::npos);
}

TEST_CASE("segments group whole transformer layers on request, from the stage's first layer",
          "[recompute]") {
  auto g = model::build_gpt({.vocab = 256, .max_seq = 64, .layers = 6, .dim = 64, .heads = 4});
  const int N = int(g.nodes().size());
  CHECK(transformer_block("h12.attn.qkv") == 12);
  CHECK(transformer_block("decoder.layers.3.mlp") == 3);
  CHECK(transformer_block("head") == -1);
  CHECK(transformer_block("h") == -1);
  CHECK(transformer_block("ln_f") == -1);
  const auto half = describe_stage(g, 0, 0, N, 64, 1);
  const auto one = describe_stage(g, 0, 0, N, 64, 1, nullptr, 1);
  const auto two = describe_stage(g, 0, 0, N, 64, 1, nullptr, 2);
  // Cut points at each block's two norms: the embedding, 12 half blocks,
  // then the final norm, the head and the loss apart. Whole blocks keep each
  // run of nodes outside the blocks as one segment, as Megatron-LM keeps
  // them out of its checkpoints: the embedding, and the norm, head and loss.
  CHECK(half.segment_nodes.size() == 1 + 12 + 3);
  CHECK(one.segment_nodes.size() == 1 + 6 + 1);
  CHECK(two.segment_nodes.size() == 1 + 3 + 1);
  CHECK(one.segment_nodes.back() == half.segment_nodes[13] + half.segment_nodes[14] +
                                        half.segment_nodes[15]);
  // The same nodes and stash in all; a block segment's stash is its two
  // halves', and its checkpoint the first half's (the block's input).
  auto sum = [](const std::vector<int64_t>& v) {
    int64_t s = 0;
    for (auto x : v) s += x;
    return s;
  };
  CHECK(sum(one.stash_bytes) == sum(half.stash_bytes));
  CHECK(one.stash_bytes[1] == half.stash_bytes[1] + half.stash_bytes[2]);
  CHECK(one.checkpoint_bytes[1] == half.checkpoint_bytes[1]);
  // Everything recomputed: one input kept per block instead of two, and
  // the transient a whole block.
  const int k_half = int(half.stash_bytes.size()) - 1, k_one = int(one.stash_bytes.size()) - 1;
  CHECK(stage_bytes(one, k_one) < stage_bytes(half, k_half) + half.stash_bytes[2]);
  CHECK(one.checkpoint_bytes[2] == half.checkpoint_bytes[3]);
  // A stage that starts inside the model counts its layers from its own first.
  const auto cuts = cut_points(g);
  const int h1 = cuts[2];  // h1.ln1
  CHECK(g.nodes()[size_t(h1)].name == "h1.ln1");
  const auto later = describe_stage(g, 1, h1, N, 64, 1, nullptr, 2);
  CHECK(later.segment_nodes[0] == two.segment_nodes[1]);  // h1 and h2, as h0 and h1 above
  CHECK_THROWS_WITH(describe_stage(g, 0, 0, N, 64, 1, nullptr, -1),
                    Catch::Contains("at least 1"));
}

TEST_CASE("a stage counts the parameters it shares with other stages (tied weights)",
          "[recompute][memory]") {
  // GPT ties the token embedding to the output layer: split in two, both
  // stages hold it; whole, nothing is shared.
  auto g = model::build_gpt({.vocab = 256, .max_seq = 64, .layers = 4, .dim = 64, .heads = 4});
  const int n = int(g.nodes().size());
  const int64_t wte = int64_t(model::gpt_config{.vocab = 256}.padded_vocab()) * 64;
  CHECK(describe_stage(g, 0, 0, n, 64, 1).tied_params == 0);
  const int half = cut_points(g)[cut_points(g).size() / 2];
  CHECK(describe_stage(g, 0, 0, half, 64, 2).tied_params == wte);
  CHECK(describe_stage(g, 1, half, n, 64, 1).tied_params == wte);
}
