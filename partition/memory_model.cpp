#include "partition/memory_model.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "model/grad_buckets.hpp"
#include "model/parameter_fetch.hpp"

namespace merak::partition {

state_bytes state_bytes_per_parameter(state_precision p, sharding_strategy s, int d) {
  if (d < 1) fail("the data-parallel size must be at least 1 (got {})", d);
  const bool mixed = p == state_precision::bf16_mixed;
  state_bytes out{mixed ? 2.0 : 4.0, 4.0, mixed ? 12.0 : 8.0};
  const double n = d;
  switch (s) {
    case sharding_strategy::optim_grads_params:
      out.parameters /= n;
      [[fallthrough]];
    case sharding_strategy::optim_grads:
      out.gradients /= n;
      [[fallthrough]];
    case sharding_strategy::optim:
      out.optimizer /= n;
      [[fallthrough]];
    case sharding_strategy::no_shard:
      break;
  }
  return out;
}

double layer_activation_bytes(int64_t s, int64_t b, int64_t h, int64_t a, int t,
                              bool sequence_parallel, activation_recompute r) {
  if (s < 1 || b < 1 || h < 1 || a < 1 || t < 1)
    fail("layer activations need positive s, b, h, a, t (got {}, {}, {}, {}, {})", s, b, h, a, t);
  const double sbh = double(s) * double(b) * double(h), T = t;
  const bool sp = sequence_parallel && t > 1;
  if (r == activation_recompute::full) return sp ? 2 * sbh / T : 2 * sbh;
  // The attention core: scores and softmax output 2 bytes each, the dropout
  // mask 1 and its output 2 (5as^2b in all), split over the heads' shards.
  const double core = r == activation_recompute::selective ? 0.0 : 5.0 * a * s / (h * T);
  // Outside the TP-split GEMMs (norms, dropouts, residuals, the inputs of
  // QKV and fc1): 10 sbh replicated, or split by t with sequence parallelism.
  const double outside = sp ? 10.0 / T : 10.0;
  return sbh * (outside + 24.0 / T + core);
}

double full_recompute_working_bytes(int64_t s, int64_t b, int64_t h, int64_t a, int t,
                                    bool sequence_parallel) {
  return layer_activation_bytes(s, b, h, a, t, sequence_parallel, activation_recompute::none);
}

double first_stage_activation_bytes(int64_t s, int64_t b, int64_t h, int64_t a, int64_t layers,
                                    int t, bool sequence_parallel, activation_recompute r) {
  double bytes = double(layers) * layer_activation_bytes(s, b, h, a, t, sequence_parallel, r);
  if (r == activation_recompute::full)
    bytes += full_recompute_working_bytes(s, b, h, a, t, sequence_parallel);
  return bytes;
}

gathered_values replay_gathered_values(const model::graph& g, int first, int last,
                                       int64_t bucket_bytes, bool late_sequence_parallel,
                                       double rounded_bytes) {
  const auto& nodes = g.nodes();
  if (first < 0 || first >= last || last > int(nodes.size()))
    fail("nodes [{}, {}) are not inside the graph's {} nodes", first, last, nodes.size());
  // The stage's parameters in the order its store makes them (first use).
  std::vector<std::string> names;
  std::vector<int64_t> bytes;
  std::vector<char> rounded;  // read only by GEMMs as a matrix
  std::map<std::string, int> index;
  const std::vector<char> late =
      model::late_gradient_nodes(g, first, last, late_sequence_parallel);
  for (int n = first; n < last; ++n) {
    const auto& node = nodes[size_t(n)];
    for (const auto& spec : node.params) {
      const bool gemm = node.kind == "linear" && spec.shape.size() == 2;
      auto [it, fresh] = index.try_emplace(spec.name, int(names.size()));
      if (fresh) {
        names.push_back(spec.name);
        bytes.push_back(4 * model::shape_numel(spec.shape));
        rounded.push_back(gemm ? 1 : 0);
      } else if (!gemm) {
        rounded[size_t(it->second)] = 0;
      }
    }
  }
  gathered_values out;
  if (names.empty()) return out;
  // A parameter read outside the stage too (a tied weight) goes in a bucket
  // by itself: it is reduced whole.
  std::vector<int> alone;
  for (int n = 0; n < int(nodes.size()); ++n) {
    if (n >= first && n < last) continue;
    for (const auto& spec : nodes[size_t(n)].params)
      if (auto it = index.find(spec.name); it != index.end() &&
          std::find(alone.begin(), alone.end(), it->second) == alone.end())
        alone.push_back(it->second);
  }
  model::grad_bucketer bucketer(bytes, model::gradients_final_after(g, first, last, names), -1,
                                bucket_bytes, alone, late);
  // In the order a backward finishes the nodes (no split weight gradients:
  // gradient shards refuse them).
  std::vector<model::grad_bucket> buckets;
  for (int k : model::backward_finish_order(last - first, late, {}))
    for (auto& x : bucketer.node_finished(k)) buckets.push_back(std::move(x));
  for (auto& x : bucketer.finish()) buckets.push_back(std::move(x));
  std::vector<int64_t> arriving(buckets.size(), 0), whole(buckets.size(), 0);
  std::vector<int> bucket_of(names.size(), -1);
  for (size_t b = 0; b < buckets.size(); ++b)
    for (int p : buckets[b].params) {
      bucket_of[size_t(p)] = int(b);
      arriving[b] += bytes[size_t(p)];
      whole[b] += rounded[size_t(p)] ? int64_t(double(bytes[size_t(p)]) * rounded_bytes / 4.0)
                                     : bytes[size_t(p)];
    }
  for (int64_t x : arriving) out.largest_bucket = std::max(out.largest_bucket, x);
  out.buckets = int(buckets.size());
  std::vector<std::vector<int>> node_buckets(size_t(last - first));
  for (int n = first; n < last; ++n)
    for (const auto& spec : nodes[size_t(n)].params) {
      const int b = bucket_of[size_t(index.at(spec.name))];
      auto& mine = node_buckets[size_t(n - first)];
      if (std::find(mine.begin(), mine.end(), b) == mine.end()) mine.push_back(b);
    }
  int64_t held = 0;
  model::parameter_fetcher::hooks h;
  h.request = [&](int b) {
    held += arriving[size_t(b)];
    out.most_held = std::max(out.most_held, held);
  };
  h.take = [&](int b) { held += whole[size_t(b)] - arriving[size_t(b)]; };
  h.release = [&](int b) { held -= whole[size_t(b)]; };
  model::parameter_fetcher fetcher(std::move(node_buckets), first, int(buckets.size()), h);
  for (int n = first; n < last; ++n) fetcher.before_node(n, n + 1 < last ? n + 1 : -1);
  for (int n = last - 1; n >= first; --n) fetcher.before_node(n, n > first ? n - 1 : -1);
  fetcher.release_all();
  return out;
}

stage_weight_bytes stage_weights(int64_t P, int64_t max_node, int d, sharding_strategy sh,
                                 int64_t bucket_bytes, const gathered_values& gathered,
                                 int64_t tied, int micro_batches) {
  stage_weight_bytes sp;
  const int64_t buckets = d > 1 ? 4 * P : 0;
  sp.parameters = 4 * P;
  sp.gradients = 4 * P + buckets;
  sp.optimizer = 8 * P;
  if (sh != sharding_strategy::no_shard) sp.optimizer = 8 * P / d;
  sp.gradients_peak = sp.gradients;
  if (shards_gradients(sh)) {
    sp.gradients = 4 * (P - tied) / d + 4 * tied;
    sp.gradients_peak = sp.gradients;
    if (d > 1) {
      const int64_t largest =
          gathered.largest_bucket > 0
              ? gathered.largest_bucket
              : std::min(std::max(bucket_bytes, 4 * max_node), 4 * P);
      const int64_t shipped =
          gathered.buckets > 0 ? int64_t(gathered.buckets) * std::max(1, micro_batches) : 3;
      // And the next bucket's gradients so far, below its size.
      sp.gradients_peak += (2 + std::min<int64_t>(2, shipped - 1)) * largest +
                           std::min(bucket_bytes, std::max<int64_t>(0, 4 * P - largest));
    }
  }
  if (shards_parameters(sh) && d > 1)
    sp.parameters = 4 * P / d + std::min(4 * P, gathered.most_held);
  return sp;
}

}  // namespace merak::partition
