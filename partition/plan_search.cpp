// The planner's search (partition/planner.hpp, search_plans): every layout
// the request allows, priced (partition/plan_pricing.hpp), simulated in the
// order of their lower bounds, and ranked.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "model/llama.hpp"
#include "partition/plan_pricing.hpp"
#include "partition/stages.hpp"

namespace merak::partition {
namespace {

using namespace pricing;

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}


// Whether the search tries schedule `kind` on `pp` stages.
bool schedule_searched(const plan_request& r, schedule_kind kind, int pp) {
  if (pp == 1 && kind != schedule_kind::one_f_one_b) return false;
  if (r.schedules.empty()) return true;
  return std::find(r.schedules.begin(), r.schedules.end(), kind) != r.schedules.end();
}

// Whether the search tries recomputation `rc` with schedule `kind` on `pp`
// stages. Unasked, stage-aware with a budget keeps everything when it fits,
// so it stands for `none`; zb-h1 runs without recomputation, interleaved
// recomputes all or nothing.
bool recompute_searched(const plan_request& r, schedule_kind kind, recompute_kind rc, int pp) {
  if (!r.recomputes.empty())
    return std::find(r.recomputes.begin(), r.recomputes.end(), rc) != r.recomputes.end();
  if (pp == 1 && rc == recompute_kind::full && !r.recompute_every_stage) return false;
  // Selective recomputation pays off where attention keeps its T x T
  // probabilities: searched unasked on GPU devices with unfused attention.
  if (rc == recompute_kind::selective)
    return !r.device.profiled && r.attention == attention_kernel::unfused;
  switch (kind) {
    case schedule_kind::zb_h1:
      return rc == recompute_kind::none;
    case schedule_kind::interleaved:
      return rc != recompute_kind::stage_aware;
    default:
      return rc != recompute_kind::none;
  }
}

// The sharding strategies the search tries with dp replicas.
std::vector<sharding_strategy> shardings_searched(const plan_request& r, int dp) {
  if (!r.search_sharding || dp == 1) return {r.sharding};
  return {sharding_strategy::no_shard, sharding_strategy::optim, sharding_strategy::optim_grads,
          sharding_strategy::optim_grads_params};
}

// Sequence parallelism off and on, or as asked.
std::vector<bool> sequence_parallel_searched(const plan_request& r, int tp) {
  if (!r.search_sequence_parallel || tp == 1) return {r.sequence_parallel && tp > 1};
  return {false, true};
}

// Blocks per recomputed segment: half blocks and whole ones for the
// recomputations that checkpoint segments, or as asked.
std::vector<int> recompute_layers_searched(const plan_request& r, recompute_kind rc) {
  const bool segments = rc == recompute_kind::full || rc == recompute_kind::stage_aware;
  if (!segments) return {0};
  if (!r.search_recompute_layers) return {r.recompute_layers};
  return {0, 1};
}

// Every candidate the request allows that follows the rules, priced but not
// simulated, in enumeration order; counts the others by rule in `res`.
std::vector<candidate> enumerate_candidates(const plan_request& r, const cost_model& costs,
                                            const model::graph& g, plan_result& res) {
  const std::vector<int> cuts = cut_points(g);
  std::vector<candidate> cands;
  for (int tp : divisors(r.devices)) {
    if (r.tp && tp != r.tp) continue;
    for (bool sp : sequence_parallel_searched(r, tp)) {
      tp_context ctx;
      try {
        ctx = make_context(g, tp, cuts, sp);
      } catch (const rule_error& e) {
        ++res.rejected[e.rule];
        continue;
      }
      for (int pp : divisors(r.devices / tp)) {
        if (r.pp && pp != r.pp) continue;
        int dp = r.devices / (tp * pp);
        if (r.dp && dp != r.dp) continue;
        if (r.global_batch % dp != 0) {
          ++res.rejected["global batch divides into dp x micro-batches"];
          continue;
        }
        for (sharding_strategy sh : shardings_searched(r, dp)) {
          plan_request q = r;  // the memory strategies of this candidate
          q.sharding = sh;
          q.sequence_parallel = sp;
          // A given micro-batch count is taken as it is; --max-micro-batches
          // bounds the search only.
          const int first_m = r.micro_batches ? r.micro_batches : 1;
          const int last_m = r.micro_batches ? r.micro_batches : r.max_micro_batches;
          for (int m = first_m; m <= last_m; ++m) {
            if ((r.global_batch / dp) % m != 0) continue;  // not a split of the batch
            for (auto kind : {schedule_kind::gpipe, schedule_kind::one_f_one_b,
                              schedule_kind::shifted, schedule_kind::zb_h1,
                              schedule_kind::interleaved}) {
              if (!schedule_searched(r, kind, pp)) continue;
              for (auto rc : {recompute_kind::none, recompute_kind::stage_aware,
                              recompute_kind::full, recompute_kind::selective}) {
                if (!recompute_searched(r, kind, rc, pp)) continue;
                for (int layers : recompute_layers_searched(r, rc)) {
                  q.recompute_layers = layers;
                  for (int ov : {0, 1, 2}) {
                    if (tp == 1 && ov > 0) continue;
                    if (r.tp_overlap >= 0 && ov != r.tp_overlap) continue;
                    try {
                      cands.push_back(prepare(q, costs, g, ctx, dp, pp, m, kind, rc, ov));
                      cands.back().order = res.evaluated++;
                    } catch (const rule_error& e) {
                      ++res.rejected[e.rule];
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return cands;
}

// Simulates the candidates in the order of their lower bounds; once a bound
// is beyond the kept-th fastest step so far (with the tie margin of
// rank_plans), no later candidate can be the plan or a runner-up. Returns
// the simulated plans in enumeration order.
std::vector<plan> simulate_candidates(const plan_request& r, const cost_model& costs,
                                      const model::graph& g, std::vector<candidate>& cands,
                                      plan_result& res) {
  std::vector<int> by_bound(cands.size());
  for (size_t i = 0; i < cands.size(); ++i) by_bound[i] = int(i);
  std::stable_sort(by_bound.begin(), by_bound.end(),
                   [&](int a, int b) { return cands[a].lower_bound < cands[b].lower_bound; });
  // Runners-up are 5 layouts besides the best; one layout has at most 4
  // recomputations x 3 overlap levels x the memory strategies searched.
  const size_t variants = (r.search_sharding ? 4 : 1) * (r.search_sequence_parallel ? 2 : 1) *
                          (r.search_recompute_layers ? 2 : 1);
  const size_t kept = 6 * 12 * variants;
  std::vector<double> fastest;  // the kept fastest step times, ascending
  std::vector<char> simulated(cands.size(), 0);
  std::map<std::string, int> pipelines;  // pipeline_key -> a simulated candidate
  for (int i : by_bound) {
    if (!r.exhaustive && fastest.size() >= kept &&
        cands[i].lower_bound > fastest.back() * (1 + 2e-3))
      break;
    const std::string key = pipeline_key(cands[i].out);
    auto same = key.empty() ? pipelines.end() : pipelines.find(key);
    finish(r, costs, g, cands[i], same == pipelines.end() ? nullptr : &cands[size_t(same->second)].out);
    if (!key.empty() && same == pipelines.end()) pipelines[key] = i;
    simulated[i] = 1;
    ++res.simulated;
    double t = cands[i].out.step_time_s;
    fastest.insert(std::upper_bound(fastest.begin(), fastest.end(), t), t);
    if (fastest.size() > kept) fastest.pop_back();
  }
  std::vector<plan> all;
  for (size_t i = 0; i < cands.size(); ++i)
    if (simulated[i]) all.push_back(std::move(cands[i].out));
  return all;
}

bool same_layout(const plan& a, const plan& b) {
  return a.dp == b.dp && a.tp == b.tp && a.pp == b.pp && a.micro_batches == b.micro_batches &&
         a.schedule == b.schedule;
}

// The best plan and up to 5 runners-up of other layouts: fastest first;
// among equals (within 0.1%), the simpler plan: fewer micro-batches, less
// recomputation, less sharding, no sequence parallelism, less overlap
// machinery.
void rank_plans(std::vector<plan> all, plan_result& res) {
  std::stable_sort(all.begin(), all.end(), [](const plan& a, const plan& b) {
    if (std::abs(a.step_time_s - b.step_time_s) > 1e-3 * std::min(a.step_time_s, b.step_time_s))
      return a.step_time_s < b.step_time_s;
    if (a.micro_batches != b.micro_batches) return a.micro_batches < b.micro_batches;
    if (a.recompute != b.recompute) return a.recompute < b.recompute;
    if (a.recompute_layers != b.recompute_layers) return a.recompute_layers < b.recompute_layers;
    if (a.sharding != b.sharding) return a.sharding < b.sharding;
    if (a.sequence_parallel != b.sequence_parallel) return !a.sequence_parallel;
    return a.tp_overlap < b.tp_overlap;
  });
  res.best = all.front();
  for (size_t i = 1; i < all.size() && res.runners_up.size() < 5; ++i) {
    // Runners-up differ in layout, not only in the overlap level.
    bool dup = false;
    for (auto& p : res.runners_up) dup = dup || same_layout(p, all[i]);
    if (!dup && !same_layout(all[i], res.best)) res.runners_up.push_back(all[i]);
  }
}

}  // namespace

plan_result search_plans(const plan_request& r, const cost_model& costs) {
  if (r.devices < 1) fail("--devices must be at least 1 (got {})", r.devices);
  if (r.global_batch < 1) fail("--global-batch-size must be at least 1 (got {})", r.global_batch);
  if (r.processes < 0 || r.processes > r.devices)
    fail("--processes must be from 0 (one per device) to --devices {} (got {})", r.devices,
         r.processes);
  model::graph g = model::build_model(r.model);
  plan_result res;
  std::vector<candidate> cands = enumerate_candidates(r, costs, g, res);
  if (cands.empty()) {
    std::string why;
    for (auto& [rule, n] : res.rejected)
      why += fmt::format("{}\"{}\" ({}x)", why.empty() ? "" : ", ", rule, n);
    fail("no plan for {} devices fits; rules that rejected candidates: {}", r.devices,
         why.empty() ? "none (no candidate)" : why);
  }
  rank_plans(simulate_candidates(r, costs, g, cands, res), res);
  return res;
}

}  // namespace merak::partition
