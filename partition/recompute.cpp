#include "partition/recompute.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "core/error.hpp"
#include "partition/stages.hpp"

namespace merak::partition {
namespace {

// Bytes a shard holds of value v for `tokens` tokens (a sequence-parallel
// slice: its share of them).
int64_t value_bytes(const model::graph& g, int v, int64_t tokens) {
  const auto& info = g.values()[size_t(v)];
  int64_t n = tokens * int64_t(model::dtype_size(info.type));
  for (auto d : info.features) n *= d;
  return n / info.token_slices;
}

recompute_plan finish(const std::vector<stage_memory>& stages, std::vector<int> k,
                      std::vector<char> selective = {}) {
  recompute_plan p;
  p.segments = std::move(k);
  p.selective = std::move(selective);
  p.selective.resize(stages.size(), 0);
  for (size_t s = 0; s < stages.size(); ++s) {
    int nodes = 0;
    for (int i = 0; i < p.segments[s]; ++i) nodes += stages[s].segment_nodes[i];
    p.nodes.push_back(nodes);
    p.bytes.push_back(stage_bytes(stages[s], p.segments[s], p.selective[s]));
  }
  return p;
}

// Where the segments of nodes [first, last) start, and last: each cut point,
// or with `layers_per_segment` N (Megatron-LM's uniform method) the first of
// every N blocks and of each run of nodes outside the blocks (the embedding,
// the head and loss: a segment each run).
std::vector<int> segment_bounds(const model::graph& g, int first, int last,
                                const std::vector<int>& cuts, int layers_per_segment) {
  std::vector<int> bounds{first};
  // The block the open segment started in (-1: outside the blocks).
  int open_block = transformer_block(g.nodes()[size_t(first)].name);
  for (int c : cuts) {
    if (c <= first || c >= last) continue;
    const int block = transformer_block(g.nodes()[size_t(c)].name);
    if (layers_per_segment > 0 && block >= 0 && open_block >= 0 && block >= open_block &&
        block < open_block + layers_per_segment)
      continue;  // inside the open segment's N blocks
    if (layers_per_segment > 0 && block < 0 && open_block < 0) continue;  // outside, as the open one
    bounds.push_back(c);
    open_block = block;
  }
  bounds.push_back(last);
  return bounds;
}

// The parameters of nodes [first, last), tied ones once, into weights_bytes
// (value, gradient, two moments) and tied_params (those other stages use).
void count_parameters(const model::graph& g, int first, int last, stage_memory& m) {
  std::set<std::string> params, elsewhere;
  int64_t count = 0;
  for (int n = first; n < last; ++n)
    for (auto& p : g.nodes()[size_t(n)].params)
      if (params.insert(p.name).second) count += model::shape_numel(p.shape);
  m.weights_bytes = count * 4 * 4;
  for (int n = 0; n < int(g.nodes().size()); ++n)
    if (n < first || n >= last)
      for (auto& p : g.nodes()[size_t(n)].params)
        if (params.count(p.name) && elsewhere.insert(p.name).second)
          m.tied_params += model::shape_numel(p.shape);
}

// input_bytes: each value from before the stage once, however many of its
// nodes read it (a block's first norm and its residual both read the
// stream). weight_bytes: what a micro-batch awaiting its weight gradients
// holds: those inputs, and each linear's output gradient and input (a
// sequence-parallel gathered input as its slice, gathered again for the
// weight gradient).
void count_held_values(const model::graph& g, int first, int last, int64_t tokens,
                       stage_memory& m) {
  std::vector<char> held(g.values().size(), 0);
  for (int n = first; n < last; ++n)
    for (int v : g.nodes()[size_t(n)].inputs)
      if (g.values()[size_t(v)].producer < first && !std::exchange(held[size_t(v)], 1))
        m.input_bytes += value_bytes(g, v, tokens);
  m.weight_bytes = m.input_bytes;
  const std::map<int, int> regathered = model::regathered_inputs(g, first, last);
  for (int n = first; n < last; ++n) {
    const auto& node = g.nodes()[size_t(n)];
    if (node.kind != "linear" || node.params.empty()) continue;
    m.weight_bytes += value_bytes(g, node.output, tokens);
    for (int v : node.inputs) {
      if (auto r = regathered.find(n); r != regathered.end())
        v = g.nodes()[size_t(r->second)].inputs[0];  // the slice
      if (!std::exchange(held[size_t(v)], 1)) m.weight_bytes += value_bytes(g, v, tokens);
    }
  }
}

}  // namespace

stage_memory describe_stage(const model::graph& g, int stage, int first, int last, int64_t tokens,
                            int in_flight, const std::vector<int>* cuts, int layers_per_segment) {
  if (layers_per_segment < 0)
    fail("layers per recomputed segment must be at least 1 (got {})", layers_per_segment);
  stage_memory m;
  m.stage = stage;
  m.in_flight = in_flight;
  count_parameters(g, first, last, m);
  const std::vector<int> bounds =
      segment_bounds(g, first, last, cuts ? *cuts : cut_points(g), layers_per_segment);
  // Per value: read by a node of the stage, and by a node after it.
  std::vector<char> read_inside(g.values().size(), 0), read_after(g.values().size(), 0);
  for (int k = first; k < int(g.nodes().size()); ++k)
    for (int v : g.nodes()[size_t(k)].inputs) (k < last ? read_inside : read_after)[size_t(v)] = 1;
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    int a = bounds[i], b = bounds[i + 1];
    m.segment_nodes.push_back(b - a);
    int64_t stash = 0, core = 0;
    for (int n = a; n < b; ++n) {
      stash += g.nodes()[n].activation_bytes_per_token * tokens;
      core += attention_core_bytes_per_token(g, g.nodes()[n]) * tokens;
      // An output that only later stages read is handed on, not held.
      const int out = g.nodes()[n].output;
      if (read_after[size_t(out)] && !read_inside[size_t(out)])
        m.output_bytes += value_bytes(g, out, tokens);
    }
    m.stash_bytes.push_back(stash);
    m.core_bytes.push_back(core);
    // The one activation entering the segment (cut points have exactly one).
    int64_t in = 0;
    for (int n = a; n < b && in == 0; ++n)
      for (int v : g.nodes()[n].inputs)
        if (g.values()[v].producer >= 0 && g.values()[v].producer < a)
          in = std::max(in, value_bytes(g, v, tokens));
    m.checkpoint_bytes.push_back(in);
  }
  count_held_values(g, first, last, tokens, m);
  return m;
}

void set_in_flight(stage_memory& mem, const stage_policy& pol, int m, int chunk) {
  const int n = std::min(pol.limited ? std::max(pol.warm, pol.steady) : m, m * pol.chunks);
  mem.in_flight = pol.chunks > 1 ? chunk_in_flight(pol, chunk) : n;
  mem.awaiting_weights = 0;
  if (pol.split_weight) {
    mem.in_flight = std::min(pol.warm, m);
    mem.awaiting_weights = n - mem.in_flight;
  }
  mem.whole_prefix = !pol.pre.empty();
}

std::vector<int> segment_starts(const stage_memory& m) {
  std::vector<int> starts;
  for (int at = 0; int n : m.segment_nodes) {
    starts.push_back(at);
    at += n;
  }
  return starts;
}

int64_t attention_core_bytes_per_token(const model::graph& g, const model::node_info& n) {
  if (n.kind != "attention") return 0;
  const auto& out = g.values()[size_t(n.output)];
  const int64_t kept =
      (out.features.empty() ? 0 : out.features.back()) * int64_t(model::dtype_size(out.type));
  return std::max<int64_t>(0, n.activation_bytes_per_token - kept);
}

int64_t stage_bytes(const stage_memory& m, int k, bool selective) {
  const int L = int(m.stash_bytes.size());
  MERAK_CHECK(k >= 0 && k <= L, "{} checkpointed segments of {}", k, L);
  int64_t kept = m.input_bytes, prefix = 0;
  for (int i = 0; i < L; ++i) {
    if (i >= k)
      kept += m.stash_bytes[i] - (selective && size_t(i) < m.core_bytes.size() ? m.core_bytes[i] : 0);
    else
      prefix += m.stash_bytes[i];
  }
  if (k > 0 && k < L) kept += m.checkpoint_bytes[k];  // the prefix's output, read by segment k
  const int64_t handed_on = std::min(m.output_bytes, m.stash_bytes[L - 1]);
  if (k < L) kept -= handed_on;
  const int64_t in_flight = std::max(1, m.in_flight);
  const int64_t awaiting = int64_t(std::max(0, m.awaiting_weights)) * m.weight_bytes;
  if (m.whole_prefix) return m.weights_bytes + in_flight * kept + prefix + awaiting;
  for (int i = 1; i < k; ++i) kept += m.checkpoint_bytes[i];  // each recomputed segment's input
  // A micro-batch's backward rebuilds segment i (the last first) once the
  // segments after it are done: it then holds the stage input, the inputs
  // of segments 1 to i and segment i's activations; the other micro-batches
  // in flight hold what their forwards kept.
  int64_t backward = kept, below = m.input_bytes;
  for (int i = 0; i < k; ++i) {
    if (i > 0) below += m.checkpoint_bytes[i];
    backward = std::max(backward, below + m.stash_bytes[i]);
  }
  // A forward ends holding the stage's outputs as well, until it hands them on.
  backward = std::max(backward, kept + handed_on);
  return m.weights_bytes + (in_flight - 1) * kept + backward + awaiting;
}

std::vector<double> stage_aware_ratios(int p, double r0) {
  if (!(r0 >= 0 && r0 <= 1)) fail("the stage-0 recomputation ratio must be in [0, 1] (got {})", r0);
  std::vector<double> r(p, 0.0);
  for (int s = 0; s + 1 < p; ++s)
    r[s] = std::clamp(1.0 - (1.0 - r0) * double(p - 1) / double(p - 1 - s), 0.0, 1.0);
  return r;
}

recompute_plan plan_stage_aware(const std::vector<stage_memory>& stages, double r0) {
  auto r = stage_aware_ratios(int(stages.size()), r0);
  std::vector<int> k;
  for (size_t s = 0; s < stages.size(); ++s)
    k.push_back(int(std::floor(double(stages[s].stash_bytes.size()) * r[s] + 1e-9)));
  return finish(stages, std::move(k));
}

recompute_plan plan_for_budget(const std::vector<stage_memory>& stages, int64_t budget,
                               bool selective) {
  if (budget <= 0) fail("--memory-budget must be positive (got {})", budget);
  std::vector<int> k;
  std::vector<char> sel;
  for (auto& m : stages) {
    const int L = int(m.stash_bytes.size());
    int best = -1;
    bool best_sel = false;
    if (stage_bytes(m, 0) <= budget) best = 0;
    for (int j = 0; j <= L && best < 0 && selective; ++j)
      if (stage_bytes(m, j, true) <= budget) best = j, best_sel = true;
    for (int j = 0; j <= L && best < 0; ++j)
      if (stage_bytes(m, j) <= budget) best = j;
    if (best < 0)
      fail(
          "stage {} needs {} bytes even with all {} layers recomputed ({} of weights and optimizer "
          "state), more than --memory-budget {}",
          m.stage, stage_bytes(m, L), L, m.weights_bytes, budget);
    k.push_back(best);
    sel.push_back(best_sel ? 1 : 0);
  }
  return finish(stages, std::move(k), std::move(sel));
}

std::string recompute_plan::str() const {
  std::string s;
  for (size_t i = 0; i < segments.size(); ++i)
    s += fmt::format("{}stage {}: {} segments recomputed{}, {:.1f} MB", i ? "; " : "", i,
                     segments[i], i < selective.size() && selective[i] ? " (the rest selective)" : "",
                     double(bytes[i]) / (1 << 20));
  return s;
}

const char* recompute_kind_name(recompute_kind k) {
  switch (k) {
    case recompute_kind::none:
      return "none";
    case recompute_kind::full:
      return "full";
    case recompute_kind::stage_aware:
      return "stage-aware";
    case recompute_kind::selective:
      return "selective";
  }
  return "?";
}

recompute_kind parse_recompute_kind(std::string_view name) {
  for (auto k : {recompute_kind::none, recompute_kind::full, recompute_kind::stage_aware,
                 recompute_kind::selective})
    if (name == recompute_kind_name(k)) return k;
  fail("unknown recompute mode '{}' (expected none, full, stage-aware or selective)", name);
}

int64_t settle_segments(stage_memory& m, const std::vector<model::node_info>& nodes, int a,
                        bool fused_core, bool selective, double lse_share) {
  int64_t most_node = 0;
  std::set<std::string> seen;
  for (int seg = 0, n = a; seg < int(m.segment_nodes.size()); n += m.segment_nodes[seg++]) {
    auto& core = m.core_bytes[size_t(seg)];
    if (fused_core) {
      m.stash_bytes[size_t(seg)] -= core - int64_t(double(core) * lse_share);
      core = 0;
    } else if (selective) {
      m.stash_bytes[size_t(seg)] -= core;
    }
    for (int k = n; k < n + m.segment_nodes[seg]; ++k) {
      int64_t own = 0;
      for (auto& p : nodes[k].params)
        if (seen.insert(p.name).second) own += model::shape_numel(p.shape);
      most_node = std::max(most_node, own);
    }
  }
  return most_node;
}

}  // namespace merak::partition
