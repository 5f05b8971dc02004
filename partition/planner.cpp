#include "partition/plan_pricing.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "core/error.hpp"
#include "model/llama.hpp"
#include "partition/critical_path.hpp"
#include "partition/recompute.hpp"
#include "partition/simulator.hpp"
#include "partition/stages.hpp"
#include "partition/tp_rewrite.hpp"

namespace merak::partition {
namespace pricing {
namespace {


cluster_spec links_of(const plan_request& r) {
  return r.cluster ? *r.cluster : cluster_of(r.device);
}

// Devices per node the plan uses: the request's devices spread evenly over
// its nodes, at most the node's size.
int devices_per_node_of(const plan_request& r, const cluster_spec& cl) {
  return std::max(1, std::min(r.devices / std::max(1, r.nodes), cl.devices_per_node));
}

// Share of a TP all-reduce left on the critical path per overlap level:
// level 1 hides it behind the other sub-micro-batch's compute except at
// each block's end, level 2 also there (spec, sub-pipelined TP).
double exposed_share(int level) {
  return level == 0 ? 1.0 : level == 1 ? 0.5 : 0.25;
}


// Each node's times for `tokens`, with the TP collectives it waits for
// (`tp_ar`: one exposed all-reduce) and, with selective recomputation, the
// attention core's forward again in its backward.
std::vector<node_time> node_times(const cost_model& costs, const model::graph& g, int64_t tokens,
                                  double tp_ar, bool selective) {
  const auto& nodes = g.nodes();
  std::vector<node_time> t(nodes.size());
  // Sequence parallelism: a reduce-scatter and an all-gather are the ring
  // all-reduce's two halves.
  const double half = tp_ar / 2;
  for (size_t n = 0; n < nodes.size(); ++n) {
    t[n] = costs.time(nodes[n], tokens);
    switch (nodes[n].comm) {
      case model::tp_comm::reduce:
        t[n].forward_s += tp_ar;
        break;
      case model::tp_comm::copy:
        t[n].backward_s += tp_ar;
        break;
      case model::tp_comm::sp_gather:
      case model::tp_comm::sp_reduce:
        t[n].forward_s += half;
        t[n].backward_s += half;
        break;
      case model::tp_comm::sp_enter:
        t[n].backward_s += half;
        break;
      case model::tp_comm::sp_exit:
        t[n].forward_s += half;
        break;
      case model::tp_comm::none:
        break;
    }
    // Selective recomputation runs the attention core's forward again.
    if (selective && nodes[n].kind == "attention") t[n].backward_s += t[n].forward_s;
  }
  // A column-parallel linear's gathered input is freed after its forward
  // and gathered again for its weight gradient (model::executor, as
  // Megatron-LM's linear layers do): one more all-gather in backward.
  for (const auto& [reader, gather] : model::regathered_inputs(g, 0, int(nodes.size())))
    t[size_t(gather)].backward_s += half;
  return t;
}

const stage_layout& layout_for(const plan_request& r, const cost_model& costs, const model::graph& g,
                         tp_context& ctx, int stages, int64_t rows, int overlap, bool selective) {
  auto key = std::make_tuple(stages, rows, overlap, selective, r.recompute_layers);
  if (auto it = ctx.layouts.find(key); it != ctx.layouts.end()) return it->second;
  stage_layout& L = ctx.layouts[key];
  const int tp = ctx.tp;
  const auto& tg = ctx.tg;
  const auto& d = r.device;
  const int64_t tokens = rows * r.model.max_seq;
  // Node times of the shard's graph, with the TP sums it waits for (TP
  // groups sit inside a node: the rule "tp within a node").
  // Bytes per activation element: a profiled device (this CPU) stores what
  // the graph says (fp32, or bf16 under --precision bf16); an analytic device
  // (a GPU) what it is described with. The graph's own byte counts are
  // rescaled to that.
  const double graph_elem = double(model::dtype_size(g.activation_type()));
  const double elem = d.profiled ? graph_elem : double(d.activation_bytes);
  const double act_scale = elem / graph_elem;
  const bool fused_core = !d.profiled && attention_is_fused(r.attention);
  L.act_bytes = double(tokens) * r.model.dim * elem;
  L.gather_elem = std::min(4.0, elem);
  const collective_cost tp_cost = allreduce_cost(links_of(r), L.act_bytes, tp, tp);
  L.tp_allreduce_s = tp_cost.seconds;
  L.tp_algo = collective_algo_name(tp_cost.algo);
  const double tp_ar = tp_cost.seconds * exposed_share(overlap);
  const auto& nodes = tg.graph.nodes();
  const std::vector<node_time> t = node_times(costs, tg.graph, tokens, tp_ar, selective);
  // Stage split on the single-device graph by time.
  const int N0 = int(g.nodes().size());
  std::vector<double> cost0(N0, 0);
  for (int n = 0; n < N0; ++n)
    for (int k = tg.node_map[n]; k < tg.node_map[n + 1]; ++k)
      cost0[n] += t[k].forward_s + t[k].backward_s;
  try {
    L.bounds = int(r.stage_bounds.size()) == stages + 1 ? r.stage_bounds
                                                     : balanced_stages(g, stages, cost0, ctx.cuts);
  } catch (const error& e) {
    L.rule = "pp within cut points";
    L.detail = e.what();
    return L;
  }
  for (int s = 0; s < stages; ++s) {
    int a = tg.node_map[L.bounds[s]], b = tg.node_map[L.bounds[s + 1]];
    L.mem.push_back(
        describe_stage(tg.graph, s, a, b, tokens, 1, &ctx.shard_cuts, r.recompute_layers));
    // A fused kernel's log-sum-exp: 4 bytes a head and token, whatever the
    // activations.
    L.max_node_params.push_back(settle_segments(L.mem.back(), nodes, a, fused_core, selective,
                                                4.0 / (double(r.model.max_seq) * elem)));
    for (auto& x : L.mem.back().stash_bytes) x = int64_t(double(x) * act_scale);
    for (auto& x : L.mem.back().checkpoint_bytes) x = int64_t(double(x) * act_scale);
    L.mem.back().input_bytes = int64_t(double(L.mem.back().input_bytes) * act_scale);
    L.mem.back().output_bytes = int64_t(double(L.mem.back().output_bytes) * act_scale);
    L.mem.back().weight_bytes = int64_t(double(L.mem.back().weight_bytes) * act_scale);
    stage_plan sp;
    sp.first = L.bounds[s];
    sp.last = L.bounds[s + 1];
    sp.first_layer = g.nodes()[L.bounds[s]].name;
    sp.last_layer = g.nodes()[L.bounds[s + 1] - 1].name;
    sp.segments = int(L.mem.back().segment_nodes.size());
    L.seg_fwd.emplace_back();
    int n = a;
    for (int len : L.mem.back().segment_nodes) {
      double f = 0;
      for (int k = n; k < n + len; ++k) f += t[k].forward_s;
      L.seg_fwd.back().push_back(f);
      n += len;
    }
    for (int k = a; k < b; ++k) {
      sp.forward_s += t[k].forward_s;
      sp.backward_s += t[k].backward_s;
      sp.weight_s += t[k].weight_s;
    }
    L.stages.push_back(sp);
  }
  return L;
}


double op_seconds(const candidate& c, int s, const op& operation, bool rib) {
  if (c.policies[s].chunks > 1) {  // interleaved: the op's chunk, a virtual stage
    const auto& ch = c.out.chunk_stages[size_t(operation.chunk * c.out.pp + s)];
    if (operation.kind == op_kind::B) return ch.backward_s + (rib ? ch.forward_s : 0.0);
    return ch.forward_s;
  }
  const auto& sp = c.out.stages[s];
  switch (operation.kind) {
    case op_kind::F:
    case op_kind::Fpc:
    case op_kind::R:
      return sp.forward_s;
    case op_kind::B:
      if (c.policies[s].split_weight) return sp.backward_s - sp.weight_s;
      if (rib) return sp.backward_s + sp.forward_s;
      if (c.policies[s].pre.count(operation.mb)) return sp.backward_s;
      return sp.backward_s + c.prefix[s];
    case op_kind::W:
      return sp.weight_s;
  }
  return 0.0;
}

// The rules a layout must follow before it is priced (throws rule_error).
void check_layout_rules(const plan_request& r, int tp, int dp, int pp, int m, schedule_kind kind,
                        recompute_kind rc, int overlap) {
  if (dp * tp * pp != r.devices)
    throw rule_error{"dp x tp x pp = devices",
                     fmt::format("{} x {} x {} != {}", dp, tp, pp, r.devices)};
  if (r.global_batch % (int64_t(dp) * m) != 0)
    throw rule_error{"global batch divides into dp x micro-batches",
                     fmt::format("{} into {} x {}", r.global_batch, dp, m)};
  if (kind == schedule_kind::shifted && pp < 3)
    throw rule_error{"shifted needs pp >= 3", fmt::format("pp {}", pp)};
  if (kind == schedule_kind::interleaved && (pp < 2 || m % pp != 0))
    throw rule_error{"interleaved needs pp >= 2 and micro-batches a multiple of pp",
                     fmt::format("pp {} m {}", pp, m)};
  if (kind == schedule_kind::interleaved && rc == recompute_kind::stage_aware)
    throw rule_error{"interleaved recomputes all or nothing", "recompute stage-aware"};
  if (kind == schedule_kind::zb_h1 && rc != recompute_kind::none)
    throw rule_error{"zb-h1 without recomputation",
                     fmt::format("recompute {}", recompute_kind_name(rc))};
  // The runtime reduce-scatters each micro-batch's gradients as its backward
  // ends; zb-h1 defers weight gradients past the next backward.
  if (kind == schedule_kind::zb_h1 && shards_gradients(r.sharding) && dp > 1)
    throw rule_error{"gradient shards without zb-h1",
                     fmt::format("sharding {}", sharding_strategy_name(r.sharding))};
  // Slices held by several TP shards (fewer K/V heads than shards) are
  // summed whole, which gradient shards do not keep.
  if (shards_gradients(r.sharding) && dp > 1 &&
      r.model.family == model::model_family::llama && model::llama_query_groups(r.model) < tp)
    throw rule_error{"gradient shards with K/V heads on every shard",
                     fmt::format("{} K/V heads over tp {}", model::llama_query_groups(r.model), tp)};
  const int64_t rows = r.global_batch / (int64_t(dp) * m);
  if (overlap > 0 && (tp == 1 || rows % 2 != 0))
    throw rule_error{"tp overlap needs tp > 1 and an even micro-batch",
                     fmt::format("tp {} rows {}", tp, rows)};
}

// A stage's model-state bytes by category (memory_model.hpp).
void weight_categories(stage_plan& sp, int64_t P, int64_t tied, int64_t max_node, int d,
                       sharding_strategy sh, int64_t bucket_bytes, const gathered_values& gathered,
                       int micro_batches = 1) {
  const stage_weight_bytes w =
      stage_weights(P, max_node, d, sh, bucket_bytes, gathered, tied, micro_batches);
  sp.parameters_bytes = w.parameters;
  sp.gradients_bytes = w.gradients;
  sp.gradients_peak_bytes = w.gradients_peak;
  sp.optimizer_bytes = w.optimizer;
}

// Each (virtual) stage's recomputed segments and memory, stage s run by
// device s % pp under its policy; fills c.prefix, the forward time of each
// stage's recomputed segments. Stage-aware recomputation fits `budget`
// (throws rule_error when it cannot).
void plan_stage_memory(candidate& c, const stage_layout& L, std::vector<stage_memory> mem,
                       const plan_request& r, recompute_kind rc, bool every_stage, int m,
                       int64_t budget, int dp, const std::vector<gathered_values>& gathered) {
  plan& out = c.out;
  const int stages = int(mem.size()), pp = out.pp;
  for (int s = 0; s < stages; ++s) {
    auto& pol = c.policies[size_t(s % pp)];
    set_in_flight(mem[s], pol, m, s / pp);
    auto& sp = out.stages[s];
    weight_categories(sp, mem[s].weights_bytes / 16, mem[s].tied_params,
                      L.max_node_params[size_t(s)], dp, r.sharding, r.bucket_bytes,
                      gathered[size_t(s)], m);
    mem[s].weights_bytes = sp.parameters_bytes + sp.gradients_peak_bytes + sp.optimizer_bytes;
  }
  std::vector<int> k(stages, 0);
  if (rc == recompute_kind::full) {
    for (int s = 0; s < stages; ++s)
      if (s % pp + 1 < pp || every_stage) k[s] = int(mem[s].stash_bytes.size());
  } else if (rc == recompute_kind::stage_aware && stages > 0) {
    try {
      k = r.recompute_ratio > 0 ? plan_stage_aware(mem, r.recompute_ratio).segments
                                : plan_for_budget(mem, budget).segments;
    } catch (const error& e) {
      throw rule_error{"memory budget", e.what()};
    }
  }
  for (int s = 0; s < stages; ++s) {
    out.stages[s].recompute_segments = k[s];
    out.stages[s].memory_bytes = stage_bytes(mem[s], k[s]);
    out.stages[s].activations_bytes = out.stages[s].memory_bytes - mem[s].weights_bytes;
    double prefix = 0;
    for (int i = 0; i < k[s]; ++i) prefix += L.seg_fwd[s][i];
    c.prefix.push_back(prefix);
  }
}

// Gradients sharded (optim_grads, optim_grads_params): no replica holds a
// whole gradient to accumulate micro-batches into, so every backward
// reduce-scatters the stage's gradients as it makes them; ZeRO-3 also
// all-gathers the stage's parameters before each forward and backward.
// Both overlap the op's compute (prefetched behind the op before) and share
// its links: an op takes at least their time. Each is one collective a
// segment (a layer), each half an all-reduce of the segment's share of the
// stage's values: 4-byte gradients, values of the run's precision (bf16
// all-gathers in bf16). Adds them to each (virtual) stage's op times
// (`exposed`: in full, plan_request::exposed_shard_collectives).
void price_shard_collectives(plan& out, const stage_layout& L, sharding_strategy sharding,
                             const cluster_spec& cl, int dp, int dp_per_node, bool exposed) {
  for (size_t s = 0; s < out.stages.size(); ++s) {
    auto& sp = out.stages[s];
    const double segments = double(std::max<size_t>(1, L.mem[s].segment_nodes.size()));
    const double params = double(L.mem[s].weights_bytes) / 16.0;
    auto half_of = [&](double elem) {
      return allreduce_cost(cl, params * elem / segments, dp, dp_per_node).seconds / 2 * segments;
    };
    const double half = half_of(4.0);
    const double gather =
        sharding == sharding_strategy::optim_grads_params ? half_of(L.gather_elem) : 0.0;
    sp.forward_s =
        exposed ? sp.forward_s + gather : overlapped_seconds(cl.device, sp.forward_s, gather);
    sp.backward_s = exposed ? sp.backward_s + gather + half
                            : overlapped_seconds(cl.device, sp.backward_s, gather + half);
  }
}

// Interleaved: the virtual stages become c.out.chunk_stages and each device
// the sum of its chunks (planner.hpp, plan::stages).
void fold_chunks(plan& out) {
  if (out.chunks == 1) return;
  out.chunk_stages = std::move(out.stages);
  out.stages.assign(size_t(out.pp), stage_plan{});
  for (size_t k = 0; k < out.chunk_stages.size(); ++k) {
    const stage_plan& ch = out.chunk_stages[k];
    stage_plan& d = out.stages[k % size_t(out.pp)];
    if (k < size_t(out.pp)) {
      d.first = ch.first;
      d.first_layer = ch.first_layer;
    }
    d.last = ch.last;
    d.last_layer = ch.last_layer;
    d.recompute_segments += ch.recompute_segments;
    d.segments += ch.segments;
    d.memory_bytes += ch.memory_bytes;
    d.parameters_bytes += ch.parameters_bytes;
    d.gradients_bytes += ch.gradients_bytes;
    d.gradients_peak_bytes += ch.gradients_peak_bytes;
    d.optimizer_bytes += ch.optimizer_bytes;
    d.activations_bytes += ch.activations_bytes;
    d.forward_s += ch.forward_s;
    d.backward_s += ch.backward_s;
    d.weight_s += ch.weight_s;
  }
}

// Throws rule_error when a device needs more than `budget` bytes.
void check_budget(const plan& out, int64_t budget) {
  for (size_t s = 0; s < out.stages.size(); ++s)
    if (out.stages[s].memory_bytes > budget)
      throw rule_error{"memory budget", fmt::format("stage {} needs {} bytes, more than {}", s,
                                                    out.stages[s].memory_bytes, budget)};
}

// The exposed dp all-reduce and the optimizer, after the pipeline. The dp
// ranks of one (stage, tp rank) sit tp x pp ranks apart.
// `device_params`: the parameters of each pipeline device (its chunks').
void price_data_parallel(candidate& c, const cost_model& costs, const cluster_spec& cl,
                         const std::vector<double>& device_params, const sharing_model& sh,
                         int dp, int tp, int per_node, sharding_strategy sharding,
                         bool overlap_param_gather, double gather_elem) {
  plan& out = c.out;
  const int pp = int(device_params.size());
  const int dp_per_node = tp * pp >= per_node ? 1 : std::max(1, per_node / (tp * pp));
  std::vector<double> opt_work;
  for (int s = 0; s < pp; ++s) {
    const double params = device_params[size_t(s)];
    const collective_cost ar_cost = allreduce_cost(cl, params * 4.0, dp, std::min(dp, dp_per_node));
    const double ar = ar_cost.seconds;
    if (ar >= out.dp_allreduce_s) {
      out.dp_allreduce_s = ar;
      out.dp_algo = dp > 1 ? collective_algo_name(ar_cost.algo) : "";
    }
    // Buckets leave during the last micro-batch's backward. Sharded, they
    // are reduce-scattered there (the ring's first half) and the updated
    // values all-gathered after the optimizer (its second half, exposed),
    // except under optim_grads_params, whose next forward gathers each
    // stage's values anyway; each replica updates its 1/dp of the
    // parameters.
    const bool sharded = sharding != sharding_strategy::no_shard && dp > 1;
    const bool gathered_later = shards_parameters(sharding);
    const double during = sharded ? ar / 2 : ar;
    // --overlap-param-gather: behind the stage's first forward of the next step.
    const double gather =
        sharded && !gathered_later
            ? allreduce_cost(cl, params * gather_elem, dp, std::min(dp, dp_per_node)).seconds / 2
            : 0.0;
    // What the overlapped collectives add to the ops they run beside
    // (their own excess, and the SMs they take from the ops' kernels).
    const auto& st = out.stages[s];
    const double after = overlap_param_gather
                             ? overlapped_seconds(cl.device, st.forward_s, gather) - st.forward_s
                             : gather;
    out.dp_exposed_s = std::max(
        out.dp_exposed_s, overlapped_seconds(cl.device, st.backward_s, during) - st.backward_s + after);
    for (int i = 0; i < dp * tp; ++i)
      opt_work.push_back(costs.optimizer_s(sharded ? params / dp : params));
  }
  out.optimizer_s = sh.cores > 0 ? shared_makespan(opt_work, sh.threads, sh.cores, sh.contention)
                                 : *std::max_element(opt_work.begin(), opt_work.end());
}

// A stage runs one op at a time, never faster than alone: its ops' total
// bounds the pipeline from below, and it cannot start before the first
// micro-batch's forwards on the stages before it, nor end later than a
// backward through each of them before the step ends.
double pipeline_lower_bound(const candidate& c, int pp, int m) {
  double pipeline_bound = 0, fill = 0, drain = 0;
  for (int s = 0; s < pp; ++s) {
    const bool rib = c.policies[s].recompute_in_backward;
    double sum = 0, fastest_b = std::numeric_limits<double>::infinity();
    const int v = c.policies[s].chunks;
    for (int mb = 0; mb < m; ++mb) {
      for (int ch = 0; ch < v; ++ch) {
        const double b = op_seconds(c, s, {op_kind::B, mb, ch}, rib);
        fastest_b = std::min(fastest_b, b);
        sum += op_seconds(c, s, {op_kind::F, mb, ch}, rib) + b;
      }
      if (c.policies[s].pre.count(mb)) sum += op_seconds(c, s, {op_kind::R, mb}, rib);
      if (c.policies[s].split_weight) sum += op_seconds(c, s, {op_kind::W, mb}, rib);
    }
    pipeline_bound = std::max(pipeline_bound, fill + sum + drain);
    if (s + 1 < pp) {
      fill += op_seconds(c, s, {op_kind::F, 0}, rib) + c.act_delay[s];
      drain += fastest_b + c.act_delay[s];
    }
  }
  return pipeline_bound;
}

// Each stage's buckets and gathered values when its replicas shard gradients; zero
// otherwise.
std::vector<gathered_values> gathered_for(const plan_request& r, tp_context& ctx, const stage_layout& L,
                                          int dp) {
  std::vector<gathered_values> out(L.stages.size());
  if (!shards_gradients(r.sharding) || dp < 2) return out;
  const bool late = r.sequence_parallel && ctx.tp > 1;
  for (size_t s = 0; s < L.stages.size(); ++s) {
    const int a = ctx.tg.node_map[size_t(L.bounds[s])], b = ctx.tg.node_map[size_t(L.bounds[s + 1])];
    const auto key = std::make_tuple(a, b, late);
    auto it = ctx.gathered.find(key);
    if (it == ctx.gathered.end())
      it = ctx.gathered
               .emplace(key, replay_gathered_values(ctx.tg.graph, a, b, r.bucket_bytes, late,
                                                    L.gather_elem))
               .first;
    out[s] = it->second;
  }
  return out;
}

}  // namespace

candidate prepare(const plan_request& r, const cost_model& costs, const model::graph& g,
                  tp_context& ctx, int dp, int pp, int m, schedule_kind kind, recompute_kind rc,
                  int overlap) {
  const int tp = ctx.tp;
  const auto& d = r.device;
  check_layout_rules(r, tp, dp, pp, m, kind, rc, overlap);
  const int64_t rows = r.global_batch / (int64_t(dp) * m);
  const int64_t tokens = rows * r.model.max_seq;
  const int64_t budget = r.memory_budget > 0 ? r.memory_budget : int64_t(d.memory_bytes);
  if (r.sequence_parallel && tp > 1 && r.model.max_seq % tp != 0)
    throw rule_error{"sequence parallel splits the sequence by tp",
                     fmt::format("tp {} does not divide {} tokens", tp, r.model.max_seq)};
  // Some stage holds at least the average share of the weights: no split
  // of this tp and pp can fit when that share alone does not.
  stage_plan least;
  weight_categories(least, int64_t(ctx.weights_bytes / 16 / pp), 0, 0, dp, r.sharding, 0, {});
  const double weights = double(least.parameters_bytes + least.gradients_bytes +
                                least.optimizer_bytes);
  if (weights > double(budget))
    throw rule_error{"memory budget",
                     fmt::format("the weights alone need {:.0f} bytes per stage, more than {}",
                                 weights, budget)};
  const cluster_spec cl = links_of(r);
  const int per_node = devices_per_node_of(r, cl);
  // A TP group never straddles two nodes: tp divides the devices per node.
  if (tp > per_node || per_node % tp != 0)
    throw rule_error{"tp within a node",
                     fmt::format("tp {} does not divide {} devices per node", tp, per_node)};
  // Interleaved: the model cut into pp x chunks virtual stages, as the
  // runtime cuts it.
  const int chunks = kind == schedule_kind::interleaved ? r.chunks : 1;
  const stage_layout& L =
      layout_for(r, costs, g, ctx, pp * chunks, rows, overlap, rc == recompute_kind::selective);
  if (!L.rule.empty()) throw rule_error{L.rule, L.detail};
  candidate c;
  c.policies = make_policies(kind, pp, m, rc == recompute_kind::full, r.chunks);
  // Megatron-LM's checkpointing recomputes on the last stage too (inside its
  // backward; the shifted schedule places recomputation itself).
  const bool every_stage =
      rc == recompute_kind::full && r.recompute_every_stage && kind != schedule_kind::shifted;
  if (every_stage) c.policies.back().recompute_in_backward = true;
  plan& out = c.out;
  out.dp = dp;
  out.tp = tp;
  out.pp = pp;
  out.micro_batches = m;
  out.schedule = kind;
  out.chunks = chunks;
  out.recompute = rc;
  out.recompute_layers = r.recompute_layers;
  out.tp_overlap = overlap;
  out.stages = L.stages;
  out.sharding = r.sharding;
  out.sequence_parallel = r.sequence_parallel && tp > 1;
  plan_stage_memory(c, L, L.mem, r, rc, every_stage, m, budget, dp, gathered_for(r, ctx, L, dp));
  if (shards_gradients(r.sharding) && dp > 1) {
    const int dp_per_node =
        std::min(dp, tp * pp >= per_node ? 1 : std::max(1, per_node / (tp * pp)));
    price_shard_collectives(out, L, r.sharding, cl, dp, dp_per_node, r.exposed_shard_collectives);
  }
  fold_chunks(out);
  check_budget(out, budget);
  // Devices sharing cores (actor devices on this CPU): every busy stage
  // keeps dp x tp actors busy.
  const sharing_model sh = costs.sharing(tokens);
  if (sh.cores > 0)
    c.sharing = core_sharing{sh.cores, sh.threads, sh.threads * dp * tp, sh.contention};
  // Activations between stages: actor devices in one process pass them by
  // reference (a message); devices send them over the node's links or, for a
  // boundary some replica's ranks (default placement: tp innermost, then
  // stages, then replicas) cross between nodes, the network.
  out.tp_allreduce_s = L.tp_allreduce_s;
  out.tp_algo = tp > 1 ? L.tp_algo : "";
  for (int s = 0; s + 1 < pp; ++s) {
    bool crosses = false;
    for (int q = 0; q < dp && !crosses; ++q) {
      const int64_t a = (int64_t(q) * pp + s) * tp, b = a + tp;
      crosses = a / per_node != b / per_node;
    }
    double transfer = d.profiled ? d.intra_latency : p2p_seconds(cl, L.act_bytes, !crosses);
    if (!d.profiled && r.scatter_gather_p2p && tp > 1 && !out.sequence_parallel)
      transfer = p2p_seconds(cl, L.act_bytes / tp, !crosses) +
                 allreduce_cost(cl, L.act_bytes, tp, tp).seconds / 2;  // the all-gather half
    c.act_delay.push_back(transfer);
    out.p2p_s = std::max(out.p2p_s, c.act_delay.back());
  }
  std::vector<double> device_params(size_t(pp), 0.0);
  for (size_t s = 0; s < L.mem.size(); ++s)
    device_params[s % size_t(pp)] += double(L.mem[s].weights_bytes) / 16.0;
  price_data_parallel(c, costs, cl, device_params, sh, dp, tp, per_node, r.sharding,
                      r.overlap_param_gather, L.gather_elem);
  c.lower_bound = pipeline_lower_bound(c, pp, m) + out.dp_exposed_s + out.optimizer_s;
  return c;
}

void finish(const plan_request& r, const cost_model& costs, const model::graph& g, candidate& c,
            const plan* same_pipeline) {
  plan& out = c.out;
  const int world = r.processes > 0 ? r.processes : out.dp * out.pp * out.tp;
  out.place = default_placement(out.dp, out.pp, out.tp, world);
  const int per_host = std::max(1, (world + std::max(1, r.nodes) - 1) / std::max(1, r.nodes));
  out.host_of_rank.clear();
  for (int q = 0; q < world; ++q) out.host_of_rank.push_back(q / per_host);
  const int pp = out.pp, chunks = out.chunks;
  // Without overlap an op that sends holds its stage for the transfer: a
  // forward to the next stage (or, interleaved, the next chunk's first
  // stage), a backward to the previous one.
  auto blocking = [&](int s, const op& operation) {
    if (r.overlap_p2p_comm || pp == 1) return 0.0;
    switch (operation.kind) {
      case op_kind::F:
      case op_kind::Fpc:
        if (s + 1 < pp) return c.act_delay[size_t(s)];
        return operation.chunk + 1 < chunks ? c.act_delay[0] : 0.0;
      case op_kind::B:
        if (s > 0) return c.act_delay[size_t(s - 1)];
        return operation.chunk > 0 ? c.act_delay[0] : 0.0;
      case op_kind::R:
      case op_kind::W:
        return 0.0;
    }
    return 0.0;
  };
  auto cost = [&](int s, const op& operation, bool rib) {
    return op_seconds(c, s, operation, rib) + blocking(s, operation);
  };
  auto delay = [&](int from, int to, int) {
    return r.overlap_p2p_comm ? c.act_delay[size_t(std::min(from, to))] : 0.0;
  };
  pipeline_trace trace;
  if (same_pipeline) {
    out.pipeline_s = same_pipeline->pipeline_s;
  } else {
    trace = simulate_pipeline(c.policies, cost, delay, c.sharing);
    MERAK_CHECK(!trace.deadlocked, "the simulated schedule deadlocked (pp {}, m {})", out.pp,
                out.micro_batches);
    out.pipeline_s = trace.makespan;
  }
  out.step_time_s = out.pipeline_s + out.dp_exposed_s + out.optimizer_s;
  const double tokens_step = double(r.global_batch) * r.model.max_seq;
  out.tokens_per_s = tokens_step / out.step_time_s;
  out.mfu =
      3.0 * g.flops_per_token() * tokens_step / (out.step_time_s * r.devices * costs.peak_flops());
  out.flops_count_recompute = out.recompute == recompute_kind::full;
  out.tflops_per_device = megatron_flops(r.model, r.global_batch, out.flops_count_recompute) /
                          (out.step_time_s * r.devices) / 1e12;
  out.path = same_pipeline ? same_pipeline->path : walk_critical_path(trace, delay);
}

std::string pipeline_key(const plan& p) {
  if (p.sharding != sharding_strategy::no_shard && p.sharding != sharding_strategy::optim)
    return "";
  std::string k = fmt::format("{} {} {} {} {} {} {} {} {}", p.dp, p.tp, p.pp, p.micro_batches,
                              int(p.schedule), p.chunks, int(p.recompute), p.tp_overlap,
                              p.sequence_parallel);
  for (auto& s : p.stages) k += fmt::format(" {}", s.recompute_segments);
  return k;
}

tp_context make_context(const model::graph& g, int tp, const std::vector<int>& cuts,
                        bool sequence_parallel) {
  if (auto e = tp_divisibility_error(g, tp); !e.empty())
    throw rule_error{"tp divides heads and features", e};
  tp_context ctx{tp, rewrite_for_tp(g, tp, 0, sequence_parallel), {}, &cuts, {}, 0, {}};
  ctx.shard_cuts = cut_points(ctx.tg.graph);
  std::set<std::string> seen;  // a tied weight counts once
  for (const auto& n : ctx.tg.graph.nodes())
    for (const auto& p : n.params)
      if (seen.insert(p.name).second) ctx.weights_bytes += double(model::shape_numel(p.shape)) * 16;
  return ctx;
}

}  // namespace pricing

std::unique_ptr<cost_model> costs_for(const plan_request& r, int cores,
                                      const std::string& cache_file) {
  if (!r.device.profiled) return analytic_costs(r.device, r.model, r.attention);
  cores = std::max(1, cores);
  // As the runtime assigns them: cores / actors threads per actor, at least one.
  int threads = std::max(1, cores / std::max(1, r.devices));
  int64_t rows = std::max<int64_t>(1, r.global_batch / std::max(1, r.devices));
  return measured_costs(r.model, threads, cores, rows, cache_file);
}

plan evaluate_plan(const plan_request& r, const cost_model& costs, int dp, int tp, int pp, int m,
                   schedule_kind kind, recompute_kind rc, int tp_overlap) {
  model::graph g = model::build_model(r.model);
  const std::vector<int> cuts = cut_points(g);
  using namespace pricing;
  try {
    tp_context ctx = make_context(g, tp, cuts, r.sequence_parallel);
    candidate c = prepare(r, costs, g, ctx, dp, pp, m, kind, rc, tp_overlap);
    finish(r, costs, g, c);
    return c.out;
  } catch (const rule_error& e) {
    fail("plan dp={} tp={} pp={} m={} breaks the rule \"{}\": {}", dp, tp, pp, m, e.rule, e.detail);
  }
}

}  // namespace merak::partition
