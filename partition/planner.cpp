#include "partition/planner.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/error.hpp"
#include "partition/recompute.hpp"
#include "partition/simulator.hpp"
#include "partition/stages.hpp"
#include "partition/tp_rewrite.hpp"

namespace merak::partition {
namespace {

// A candidate broke a named rule.
struct rule_error {
  std::string rule, detail;
};

double ring_time(double bytes, int n, double bw, double latency) {
  if (n <= 1 || bytes <= 0) return 0;
  return 2.0 * (n - 1) / n * bytes / bw + 2.0 * (n - 1) * latency;
}

// Share of a TP all-reduce left on the critical path per overlap level:
// level 1 hides it behind the other sub-micro-batch's compute except at
// each block's end, level 2 also there (spec, sub-pipelined TP).
double exposed_share(int level) {
  return level == 0 ? 1.0 : level == 1 ? 0.5 : 0.25;
}

// What the search reuses across candidates with the same tp.
struct tp_context {
  int tp = 1;
  tp_graph tg;
};

plan evaluate(const plan_request& r, const cost_model& costs, const model::graph& g,
              const tp_context& ctx, int dp, int pp, int m, schedule_kind kind, recompute_kind rc,
              int overlap) {
  const int tp = ctx.tp;
  const auto& tg = ctx.tg;
  const auto& d = r.device;
  if (dp * tp * pp != r.devices)
    throw rule_error{"dp x tp x pp = devices",
                     fmt::format("{} x {} x {} != {}", dp, tp, pp, r.devices)};
  if (r.global_batch % (int64_t(dp) * m) != 0)
    throw rule_error{"global batch divides into dp x micro-batches",
                     fmt::format("{} into {} x {}", r.global_batch, dp, m)};
  if (kind == schedule_kind::shifted && pp < 3)
    throw rule_error{"shifted needs pp >= 3", fmt::format("pp {}", pp)};
  const int64_t rows = r.global_batch / (int64_t(dp) * m);
  if (overlap > 0 && (tp == 1 || rows % 2 != 0))
    throw rule_error{"tp overlap needs tp > 1 and an even micro-batch",
                     fmt::format("tp {} rows {}", tp, rows)};
  const int64_t tokens = rows * r.model.max_seq;
  const int per_node = std::max(1, r.devices / std::max(1, r.nodes));
  const bool tp_intra = tp <= std::min(per_node, d.devices_per_node);
  if (!tp_intra) throw rule_error{"tp within a node", fmt::format("tp {} > {}", tp, per_node)};
  // Node times of the shard's graph, with the TP sums it waits for.
  const double act_scale = double(d.activation_bytes) / 4.0;  // the graph counts f32
  const double act_bytes = double(tokens) * r.model.dim * d.activation_bytes;
  const double tp_ar =
      ring_time(act_bytes, tp, d.intra_bw, d.intra_latency) * exposed_share(overlap);
  const auto& nodes = tg.graph.nodes();
  std::vector<node_time> t(nodes.size());
  for (size_t n = 0; n < nodes.size(); ++n) {
    t[n] = costs.time(nodes[n], tokens);
    if (nodes[n].comm == model::tp_comm::reduce) t[n].forward_s += tp_ar;
    if (nodes[n].comm == model::tp_comm::copy) t[n].backward_s += tp_ar;
  }
  // Stage split on the single-device graph by time.
  const int N0 = int(g.nodes().size());
  std::vector<double> cost0(N0, 0);
  for (int n = 0; n < N0; ++n)
    for (int k = tg.node_map[n]; k < tg.node_map[n + 1]; ++k)
      cost0[n] += t[k].forward_s + t[k].backward_s;
  std::vector<int> bounds;
  try {
    bounds = balanced_stages(g, pp, cost0);
  } catch (const error& e) {
    throw rule_error{"pp within cut points", e.what()};
  }
  auto policies = make_policies(kind, pp, m, rc == recompute_kind::full);
  std::vector<stage_memory> mem;
  std::vector<std::vector<double>> seg_fwd(pp);  // forward seconds per segment
  plan out;
  out.dp = dp;
  out.tp = tp;
  out.pp = pp;
  out.micro_batches = m;
  out.schedule = kind;
  out.recompute = rc;
  out.tp_overlap = overlap;
  for (int s = 0; s < pp; ++s) {
    int a = tg.node_map[bounds[s]], b = tg.node_map[bounds[s + 1]];
    auto& pol = policies[s];
    int in_flight = pol.limited ? std::max(pol.warm, pol.steady) : m;
    mem.push_back(describe_stage(tg.graph, s, a, b, tokens, in_flight));
    for (auto& x : mem.back().stash_bytes) x = int64_t(double(x) * act_scale);
    for (auto& x : mem.back().checkpoint_bytes) x = int64_t(double(x) * act_scale);
    mem.back().input_bytes = int64_t(double(mem.back().input_bytes) * act_scale);
    stage_plan sp;
    sp.first = bounds[s];
    sp.last = bounds[s + 1];
    sp.first_layer = g.nodes()[bounds[s]].name;
    sp.last_layer = g.nodes()[bounds[s + 1] - 1].name;
    sp.segments = int(mem.back().segment_nodes.size());
    int n = a;
    for (int len : mem.back().segment_nodes) {
      double f = 0;
      for (int k = n; k < n + len; ++k) f += t[k].forward_s;
      seg_fwd[s].push_back(f);
      n += len;
    }
    for (int k = a; k < b; ++k) {
      sp.forward_s += t[k].forward_s;
      sp.backward_s += t[k].backward_s;
    }
    out.stages.push_back(sp);
  }
  const int64_t budget = r.memory_budget > 0 ? r.memory_budget : int64_t(d.memory_bytes);
  std::vector<int> k(pp, 0);
  if (rc == recompute_kind::full) {
    for (int s = 0; s + 1 < pp; ++s) k[s] = int(mem[s].stash_bytes.size());
  } else if (rc == recompute_kind::stage_aware && pp > 0) {
    try {
      k = plan_for_budget(mem, budget).segments;
    } catch (const error& e) {
      throw rule_error{"memory budget", e.what()};
    }
  }
  for (int s = 0; s < pp; ++s) {
    out.stages[s].recompute_segments = k[s];
    out.stages[s].memory_bytes = stage_bytes(mem[s], k[s]);
    if (out.stages[s].memory_bytes > budget)
      throw rule_error{"memory budget", fmt::format("stage {} needs {} bytes, more than {}", s,
                                                    out.stages[s].memory_bytes, budget)};
  }
  // The step: the pipeline by simulation, then the exposed dp all-reduce
  // and the optimizer.
  auto op_cost = [&](int s, const op& o, bool rib) {
    const auto& sp = out.stages[s];
    double prefix = 0;
    for (int i = 0; i < k[s]; ++i) prefix += seg_fwd[s][i];
    switch (o.kind) {
      case op_kind::F:
      case op_kind::Fpc:
        return sp.forward_s;
      case op_kind::R:
        return sp.forward_s;
      case op_kind::B:
        if (rib) return sp.backward_s + sp.forward_s;
        if (policies[s].pre.count(o.mb)) return sp.backward_s;
        return sp.backward_s + prefix;
    }
    return 0.0;
  };
  const bool pp_intra = tp * pp <= std::min(per_node, d.devices_per_node);
  auto delay = [&](int, int, int) {
    return pp_intra ? act_bytes / d.intra_bw + d.intra_latency
                    : act_bytes / d.inter_bw + d.inter_latency;
  };
  auto trace = simulate_pipeline(policies, op_cost, delay);
  MERAK_CHECK(!trace.deadlocked, "the simulated schedule deadlocked (pp {}, m {})", pp, m);
  out.pipeline_s = trace.makespan;
  const bool dp_intra = r.devices <= std::min(per_node, d.devices_per_node);
  for (int s = 0; s < pp; ++s) {
    double params = double(mem[s].weights_bytes) / 16.0;
    double ar = ring_time(params * 4.0, dp, dp_intra ? d.intra_bw : d.inter_bw,
                          dp_intra ? d.intra_latency : d.inter_latency);
    // Buckets leave during the last micro-batch's backward.
    out.dp_exposed_s = std::max(out.dp_exposed_s, std::max(0.0, ar - out.stages[s].backward_s));
    out.optimizer_s = std::max(out.optimizer_s, params * 28.0 / d.memory_bw);
  }
  out.step_time_s = out.pipeline_s + out.dp_exposed_s + out.optimizer_s;
  const double tokens_step = double(r.global_batch) * r.model.max_seq;
  out.tokens_per_s = tokens_step / out.step_time_s;
  out.mfu =
      3.0 * g.flops_per_token() * tokens_step / (out.step_time_s * r.devices * costs.peak_flops());
  return out;
}

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

tp_context make_context(const model::graph& g, int tp) {
  if (auto e = tp_divisibility_error(g, tp); !e.empty())
    throw rule_error{"tp divides heads and features", e};
  return {tp, rewrite_for_tp(g, tp, 0)};
}

}  // namespace

const char* recompute_kind_name(recompute_kind k) {
  switch (k) {
    case recompute_kind::none:
      return "none";
    case recompute_kind::full:
      return "full";
    case recompute_kind::stage_aware:
      return "stage-aware";
  }
  return "?";
}

const char* plan::recompute_name() const {
  int segments = 0;
  for (auto& s : stages) segments += s.recompute_segments;
  if (recompute == recompute_kind::stage_aware && segments == 0) return "none";
  return recompute_kind_name(recompute);
}

std::string plan::str() const {
  return fmt::format(
      "dp={} tp={} pp={} m={} {} recompute={} tp-overlap={}: {:.4g} s/step, {:.0f} tokens/s, "
      "MFU {:.1f}%",
      dp, tp, pp, micro_batches, schedule_name(schedule), recompute_name(), tp_overlap, step_time_s,
      tokens_per_s, 100 * mfu);
}

std::unique_ptr<cost_model> costs_for(const plan_request& r, int cores,
                                      const std::string& cache_file) {
  if (!r.device.profiled) return analytic_costs(r.device);
  cores = std::max(1, cores);
  int threads = std::max(1, cores / std::max(1, r.devices));
  int64_t rows = std::max<int64_t>(1, r.global_batch / std::max(1, r.devices));
  double slowdown = std::max(1.0, double(r.devices) / cores);
  return measured_costs(profile_cpu(r.model, rows, threads, cache_file), slowdown);
}

plan evaluate_plan(const plan_request& r, const cost_model& costs, int dp, int tp, int pp, int m,
                   schedule_kind kind, recompute_kind rc, int tp_overlap) {
  model::graph g = model::build_gpt(r.model);
  try {
    return evaluate(r, costs, g, make_context(g, tp), dp, pp, m, kind, rc, tp_overlap);
  } catch (const rule_error& e) {
    fail("plan dp={} tp={} pp={} m={} breaks the rule \"{}\": {}", dp, tp, pp, m, e.rule, e.detail);
  }
}

plan_result search_plans(const plan_request& r, const cost_model& costs) {
  if (r.devices < 1) fail("--devices must be at least 1 (got {})", r.devices);
  if (r.global_batch < 1) fail("--global-batch-size must be at least 1 (got {})", r.global_batch);
  model::graph g = model::build_gpt(r.model);
  plan_result res;
  std::vector<plan> all;
  for (int tp : divisors(r.devices)) {
    if (r.tp && tp != r.tp) continue;
    tp_context ctx;
    try {
      ctx = make_context(g, tp);
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
      for (int m = 1; m <= r.max_micro_batches; ++m) {
        if (r.micro_batches && m != r.micro_batches) continue;
        if ((r.global_batch / dp) % m != 0) continue;  // not a split of the batch
        for (auto kind :
             {schedule_kind::gpipe, schedule_kind::one_f_one_b, schedule_kind::shifted}) {
          if (pp == 1 && kind != schedule_kind::one_f_one_b) continue;
          if (!r.schedules.empty() &&
              std::find(r.schedules.begin(), r.schedules.end(), kind) == r.schedules.end())
            continue;
          for (auto rc :
               {recompute_kind::none, recompute_kind::stage_aware, recompute_kind::full}) {
            // stage-aware with a budget keeps everything when it fits, so it
            // stands for `none` unless none is asked for by name.
            if (r.recomputes.empty()
                    ? rc == recompute_kind::none
                    : std::find(r.recomputes.begin(), r.recomputes.end(), rc) == r.recomputes.end())
              continue;
            if (pp == 1 && rc == recompute_kind::full && r.recomputes.empty()) continue;
            for (int ov : {0, 1, 2}) {
              if (tp == 1 && ov > 0) continue;
              if (r.tp_overlap >= 0 && ov != r.tp_overlap) continue;
              try {
                all.push_back(evaluate(r, costs, g, ctx, dp, pp, m, kind, rc, ov));
                ++res.evaluated;
              } catch (const rule_error& e) {
                ++res.rejected[e.rule];
              }
            }
          }
        }
      }
    }
  }
  if (all.empty()) {
    std::string why;
    for (auto& [rule, n] : res.rejected)
      why += fmt::format("{}\"{}\" ({}x)", why.empty() ? "" : ", ", rule, n);
    fail("no plan for {} devices fits; rules that rejected candidates: {}", r.devices,
         why.empty() ? "none (no candidate)" : why);
  }
  // Fastest first; among equals (within 0.1%), the simpler plan: fewer
  // micro-batches, less recomputation, less overlap machinery.
  std::stable_sort(all.begin(), all.end(), [](const plan& a, const plan& b) {
    if (std::abs(a.step_time_s - b.step_time_s) > 1e-3 * std::min(a.step_time_s, b.step_time_s))
      return a.step_time_s < b.step_time_s;
    if (a.micro_batches != b.micro_batches) return a.micro_batches < b.micro_batches;
    if (a.recompute != b.recompute) return a.recompute < b.recompute;
    return a.tp_overlap < b.tp_overlap;
  });
  res.best = all.front();
  for (size_t i = 1; i < all.size() && res.runners_up.size() < 5; ++i) {
    // Runners-up differ in layout, not only in the overlap level.
    bool dup = false;
    for (auto& p : res.runners_up)
      dup = dup || (p.dp == all[i].dp && p.tp == all[i].tp && p.pp == all[i].pp &&
                    p.micro_batches == all[i].micro_batches && p.schedule == all[i].schedule);
    if (!dup &&
        !(all[i].dp == res.best.dp && all[i].tp == res.best.tp && all[i].pp == res.best.pp &&
          all[i].micro_batches == res.best.micro_batches && all[i].schedule == res.best.schedule))
      res.runners_up.push_back(all[i]);
  }
  return res;
}

}  // namespace merak::partition
