// The schedules emerge from priorities: check them against the spec's
// reference orders, and for safety under random costs.
#include <catch2/catch.hpp>

#include <sstream>

#include "core/rng.hpp"
#include "partition/simulator.hpp"

using namespace merak;
using namespace merak::partition;

namespace {

std::string join(const std::vector<op>& ops) {
  std::ostringstream s;
  for (size_t i = 0; i < ops.size(); ++i) s << (i ? " " : "") << op_name(ops[i]);
  return s.str();
}

auto no_delay = [](int, int, int) { return 0.0; };

// A random pipeline: p stages (at least min_p), m micro-batches, any
// schedule, full recomputation where the schedule allows; its policies, and
// the ops each stage runs per micro-batch.
struct random_pipeline {
  schedule_kind kind;
  int p, m, chunks;
  bool full;
  std::vector<stage_policy> pols;
  int ops_per_mb() const {
    return kind == schedule_kind::zb_h1 ? 3 : kind == schedule_kind::interleaved ? 2 * chunks : 2;
  }
};
random_pipeline make_random_pipeline(rng& r, int min_p) {
  random_pipeline x;
  x.p = min_p + int(r.below(8 - min_p));
  x.m = x.p + int(r.below(2 * x.p + 1));
  x.kind = schedule_kind(r.below(5));
  if (x.p == 1 && x.kind == schedule_kind::interleaved) x.kind = schedule_kind::gpipe;
  x.full = r.below(2) == 1 && x.kind != schedule_kind::zb_h1 &&
           x.kind != schedule_kind::interleaved;
  x.chunks = 2 + int(r.below(3));
  if (x.kind == schedule_kind::interleaved) x.m = x.p * (1 + int(r.below(3)));
  x.pols = make_policies(x.kind, x.p, x.m, x.full, x.chunks);
  return x;
}

// Random per-stage speeds, per-op jitter and link delays.
struct random_timing {
  std::vector<double> scale;
  rng* r;
  random_timing(rng& gen, int p) : scale(size_t(p)), r(&gen) {
    for (auto& x : scale) x = 0.2 + 3.0 * r->uniform();
  }
  op_cost_fn cost() {
    return [this](int s, const op& o, bool rib) {
      return uniform_costs(1, 2, 1, 1)(s, o, rib) * scale[size_t(s)] * (0.5 + r->uniform());
    };
  }
  link_delay_fn delay() {
    return [this](int, int, int) { return 2.0 * r->uniform(); };
  }
};

}  // namespace

TEST_CASE("the spec's p=4 m=8 orders are reproduced exactly", "[schedule]") {
  const char* shifted[] = {"F0 F1 F2 F3 B0 F4 B1 Fpc5 B2 Fpc6 B3 Fpc7 B4 R5 B5 R6 B6 R7 B7",
                           "Fpc0 F1 F2 R0 B0 F3 B1 F4 B2 F5 B3 Fpc6 B4 Fpc7 B5 R6 B6 R7 B7",
                           "Fpc0 Fpc1 F2 R0 B0 R1 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7",
                           "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7"};
  const char* one_f_one_b[] = {"F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7",
                               "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7",
                               "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7",
                               "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7"};
  auto sh = simulate_pipeline(make_policies(schedule_kind::shifted, 4, 8), uniform_costs(1, 2, 1),
                              no_delay);
  auto fb = simulate_pipeline(make_policies(schedule_kind::one_f_one_b, 4, 8),
                              uniform_costs(1, 2, 1), no_delay);
  for (int s = 0; s < 4; ++s) {
    CHECK(join(sh.order(s)) == shifted[s]);
    CHECK(join(fb.order(s)) == one_f_one_b[s]);
    CHECK(join(reference_order(schedule_kind::shifted, 4, 8, s)) == shifted[s]);
  }
  auto gp = simulate_pipeline(make_policies(schedule_kind::gpipe, 4, 8), uniform_costs(1, 2, 1),
                              no_delay);
  for (int s = 0; s < 4; ++s)
    CHECK(join(gp.order(s)) == "F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7");
}

TEST_CASE("emergent orders equal the rule-built orders for p = 3..8, m = p..3p", "[schedule]") {
  for (auto kind : {schedule_kind::gpipe, schedule_kind::one_f_one_b, schedule_kind::shifted})
    for (int p = 3; p <= 8; ++p)
      for (int m = p; m <= 3 * p; ++m) {
        auto tr = simulate_pipeline(make_policies(kind, p, m), uniform_costs(1, 2, 1), no_delay);
        REQUIRE_FALSE(tr.deadlocked);
        for (int s = 0; s < p; ++s) {
          INFO(schedule_name(kind) << " p=" << p << " m=" << m << " s=" << s);
          CHECK(join(tr.order(s)) == join(reference_order(kind, p, m, s)));
        }
      }
}

TEST_CASE("the shifted schedule hides recomputation in the waiting time", "[schedule]") {
  // t_F = 1, t_B = 2, t_R = 1, p = 4, m = 8, asynchronous sends (spec: 42 -> 33).
  auto full = simulate_pipeline(make_policies(schedule_kind::one_f_one_b, 4, 8, true),
                                uniform_costs(1, 2, 1), no_delay);
  auto plain = simulate_pipeline(make_policies(schedule_kind::one_f_one_b, 4, 8),
                                 uniform_costs(1, 2, 1), no_delay);
  auto shifted = simulate_pipeline(make_policies(schedule_kind::shifted, 4, 8),
                                   uniform_costs(1, 2, 1), no_delay);
  CHECK(full.makespan == 42);
  CHECK(shifted.makespan == 33);
  CHECK(plain.makespan == 33);
  // The ideal bubble of 1F1B: (p-1)/(m+p-1) of each stage's time.
  CHECK(plain.bubble_fraction() == Approx(3.0 / 11.0));
}

TEST_CASE("no deadlock and no in-flight overrun under random costs and delays", "[schedule]") {
  for (uint64_t seed = 0; seed < 300; ++seed) {
    rng r(seed, 1);
    auto x = make_random_pipeline(r, 2);
    random_timing timing(r, x.p);
    auto tr = simulate_pipeline(x.pols, timing.cost(), timing.delay());
    INFO("seed " << seed << " " << schedule_name(x.kind) << " p=" << x.p << " m=" << x.m);
    REQUIRE_FALSE(tr.deadlocked);
    for (int s = 0; s < x.p; ++s) {
      auto& pol = x.pols[size_t(s)];
      if (pol.limited) CHECK(tr.max_in_flight[s] <= std::max(pol.warm, pol.steady));
      CHECK(int(tr.stages[s].size()) >= x.ops_per_mb() * x.m);
    }
  }
}

TEST_CASE("fixed orders hold under any costs and delays, and never deadlock", "[schedule]") {
  // What the data-parallel replicas of a stage under parameter shards rely
  // on: each stage runs the order fixed for it, whatever arrives when.
  for (uint64_t seed = 0; seed < 200; ++seed) {
    rng r(seed, 2);
    auto x = make_random_pipeline(r, 1);
    INFO("seed " << seed << " " << schedule_name(x.kind) << " p=" << x.p << " m=" << x.m
                 << " full=" << x.full);
    fix_orders(x.pols);
    for (int run = 0; run < 3; ++run) {
      random_timing timing(r, x.p);
      auto tr = simulate_pipeline(x.pols, timing.cost(), timing.delay());
      REQUIRE_FALSE(tr.deadlocked);
      for (int s = 0; s < x.p; ++s) {
        INFO("stage " << s);
        CHECK(int(x.pols[size_t(s)].order.size()) >= x.ops_per_mb() * x.m);
        CHECK(join(tr.order(s)) == join(x.pols[size_t(s)].order));
      }
    }
  }
}

TEST_CASE("without a fixed order the order follows the arrivals", "[schedule]") {
  // GPipe's last stage runs B0 while F1's input is late; with the order
  // fixed it waits for F1.
  auto late = [](int, int, int mb) { return mb == 1 ? 10.0 : 0.0; };
  auto pols = make_policies(schedule_kind::gpipe, 2, 4);
  const auto even = join(simulate_pipeline(pols, uniform_costs(1, 2, 1), no_delay).order(1));
  CHECK(join(simulate_pipeline(pols, uniform_costs(1, 2, 1), late).order(1)) != even);
  fix_orders(pols);
  CHECK(join(simulate_pipeline(pols, uniform_costs(1, 2, 1), late).order(1)) == even);
}

TEST_CASE("zb-h1 leaves (p-1)(F+B-W) of bubble: weight gradients fill the drain", "[schedule]") {
  // F = B = W = 1 (B the input gradient, W the weight gradient): zb-h1 takes
  // 3m + (p-1) (Qi et al. 2023), 1F1B with its whole backward (B + W = 2)
  // 3(m + p - 1).
  for (int p = 2; p <= 8; ++p)
    for (int m = p; m <= 3 * p; ++m) {
      INFO("p=" << p << " m=" << m);
      auto zb = simulate_pipeline(make_policies(schedule_kind::zb_h1, p, m),
                                  uniform_costs(1, 1, 0, 1), no_delay);
      auto ofob = simulate_pipeline(make_policies(schedule_kind::one_f_one_b, p, m),
                                    uniform_costs(1, 2, 0), no_delay);
      REQUIRE_FALSE(zb.deadlocked);
      CHECK(zb.makespan == 3.0 * m + (p - 1));
      CHECK(ofob.makespan == 3.0 * (m + p - 1));
      for (int s = 0; s < p; ++s) {
        // Every micro-batch's F, B and W, W after its B; never more than
        // p micro-batches awaiting their W (1F1B's first stage's memory).
        int f = 0, b = 0, w = 0;
        for (auto& t : zb.stages[s]) {
          if (t.what.kind == op_kind::F) CHECK(t.what.mb == f++);
          if (t.what.kind == op_kind::B) CHECK(t.what.mb == b++);
          if (t.what.kind == op_kind::W) CHECK(t.what.mb == w++);
          CHECK(w <= b);
        }
        CHECK((f == m && b == m && w == m));
        CHECK(zb.max_in_flight[s] <= p);
      }
    }
  CHECK_THROWS_WITH(make_policy(schedule_kind::zb_h1, 4, 8, 0, true),
                    Catch::Contains("without recomputation"));
  CHECK(parse_schedule("zb-h1") == schedule_kind::zb_h1);
}

TEST_CASE("interleaved 1F1B leaves (p-1)/v of 1F1B's bubble", "[schedule]") {
  // A stage's F = 1, B = 2, split into v chunks of 1/v each: the step takes
  // m(F + B) + (p - 1)(F + B)/v (Narayanan et al. 2021), 1F1B's
  // (m + p - 1)(F + B).
  for (int p = 2; p <= 8; ++p)
    for (int v = 2; v <= 4; ++v)
      for (int m = p; m <= 3 * p; m += p) {
        INFO("p=" << p << " v=" << v << " m=" << m);
        auto pols = make_policies(schedule_kind::interleaved, p, m, false, v);
        auto tr = simulate_pipeline(pols, uniform_costs(1.0 / v, 2.0 / v, 0), no_delay);
        REQUIRE_FALSE(tr.deadlocked);
        CHECK(tr.makespan == Approx(3.0 * m + 3.0 * (p - 1) / v).epsilon(1e-12));
        for (int s = 0; s < p; ++s) {
          // Each chunk's micro-batches forward in order, and every (micro-batch,
          // chunk) runs F then B exactly once.
          std::vector<int> next_f(v, 0), seen_b(v, 0);
          for (auto& t : tr.stages[s]) {
            if (t.what.kind == op_kind::F) CHECK(t.what.mb == next_f[t.what.chunk]++);
            if (t.what.kind == op_kind::B) ++seen_b[t.what.chunk];
          }
          for (int c = 0; c < v; ++c) CHECK((next_f[c] == m && seen_b[c] == m));
          CHECK(tr.max_in_flight[s] <= pols[s].warm);
        }
      }
  CHECK_THROWS_WITH(make_policy(schedule_kind::interleaved, 4, 6, 0, false, 2),
                    Catch::Contains("multiple of --pp"));
  CHECK_THROWS_WITH(make_policy(schedule_kind::interleaved, 4, 8, 0, false, 1),
                    Catch::Contains("at least 2 chunks"));
  CHECK(op_name({op_kind::B, 3, 1}) == "B3.1");
}

TEST_CASE("an interleaved device holds each chunk's micro-batches as chunk_in_flight counts",
          "[schedule][memory]") {
  // The most micro-batches of each chunk a device holds at once in a
  // simulated run (a forward holds from its start, a backward frees at its
  // end), against the count the planner and the scheduler actor use: never
  // above it; with backwards twice the forwards, reached with two chunks
  // and within one with three (a backward of the middle chunk can run
  // before the forward the count places ahead of it).
  for (int p = 2; p <= 6; ++p)
    for (int v = 2; v <= 3; ++v)
      for (int m = p; m <= 3 * p; m += p)
        for (double b : {2.0, 1.0, 3.0}) {
          INFO("p=" << p << " v=" << v << " m=" << m << " B/F=" << b);
          auto pols = make_policies(schedule_kind::interleaved, p, m, false, v);
          auto tr = simulate_pipeline(pols, uniform_costs(1.0, b, 0), no_delay);
          REQUIRE_FALSE(tr.deadlocked);
          for (int s = 0; s < p; ++s) {
            std::vector<int> held(v, 0), most(v, 0);
            for (auto& t : tr.stages[s]) {
              if (t.what.kind == op_kind::F) {
                const int c = t.what.chunk;
                most[c] = std::max(most[c], ++held[c]);
              }
              if (t.what.kind == op_kind::B) --held[t.what.chunk];
            }
            for (int c = 0; c < v; ++c) {
              INFO("stage " << s << " chunk " << c);
              CHECK(most[c] <= chunk_in_flight(pols[s], c));
              if (b == 2.0) CHECK(most[c] >= chunk_in_flight(pols[s], c) - (v - 2));
            }
          }
        }
  // Megatron-LM's order on the first of 4 devices, 2 chunks, 8 micro-batches:
  // 11 forwards before the first backward (4 of chunk 0, 4 of chunk 1, 3 of
  // chunk 0), whose backwards start with chunk 1's, so the 12th forward
  // (chunk 0) comes before any of chunk 0's backwards: chunk 0 holds 8,
  // chunk 1 at most 4, where a share of the device's 11 would say 6 each.
  auto first = make_policy(schedule_kind::interleaved, 4, 8, 0, false, 2);
  CHECK(chunk_in_flight(first, 0) == 8);
  CHECK(chunk_in_flight(first, 1) == 4);
}
