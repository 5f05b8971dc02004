#include "partition/stages.hpp"

#include <algorithm>
#include <limits>

#include "core/error.hpp"

namespace merak::partition {

std::vector<int> crossing_counts(const model::graph& g) {
  auto& nodes = g.nodes();
  auto& values = g.values();
  const int n = int(nodes.size());
  // last_use[v]: the last node reading value v.
  std::vector<int> last_use(values.size(), -1);
  for (int i = 0; i < n; ++i)
    for (int v : nodes[i].inputs) last_use[v] = std::max(last_use[v], i);
  // A value produced by node p and last read by node u crosses every cut c
  // with p < c <= u: count them with a difference array, O(nodes + values).
  std::vector<int> delta(n + 2, 0);
  for (size_t v = 0; v < values.size(); ++v) {
    int p = values[v].producer;
    if (p < 0 || last_use[v] <= p) continue;
    ++delta[p + 1];
    --delta[last_use[v] + 1];
  }
  std::vector<int> crossing(n + 1, 0);
  for (int c = 1; c < n; ++c) crossing[c] = crossing[c - 1] + delta[c];
  return crossing;
}

std::vector<int> cut_points(const model::graph& g) {
  auto crossing = crossing_counts(g);
  std::vector<int> cuts;
  for (int c = 1; c < int(g.nodes().size()); ++c)
    if (crossing[c] == 1) cuts.push_back(c);
  return cuts;
}

int transformer_block(std::string_view name) {
  for (std::string_view prefix : {"h", "decoder.layers."}) {
    if (name.substr(0, prefix.size()) != prefix) continue;
    size_t i = prefix.size();
    int block = 0;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9' && block < (1 << 24))
      block = block * 10 + (name[i++] - '0');
    if (i > prefix.size() && i < name.size() && name[i] == '.') return block;
  }
  return -1;
}

std::vector<int> balanced_stages(const model::graph& g, int pp) {
  std::vector<double> flops;
  for (auto& node : g.nodes()) flops.push_back(node.flops_per_token);
  return balanced_stages(g, pp, flops);
}

namespace {

// Stages a greedy walk needs when each takes the most positions it can at
// cost <= v (k positions, the last at k - 1); pp + 1 once it needs more
// than pp, or a single step costs more than v.
int stages_needed(const std::vector<int>& pos, const std::vector<double>& prefix, int pp,
                  double v) {
  const int k = int(pos.size());
  int stages = 0, i = 0;
  while (i < k - 1) {
    if (++stages > pp) return pp + 1;
    int j = i;
    while (j + 1 < k && prefix[size_t(pos[j + 1])] - prefix[size_t(pos[i])] <= v) ++j;
    if (j == i) return pp + 1;
    i = j;
  }
  return stages;
}

}  // namespace

split_result min_max_split(const std::vector<int>& pos, const std::vector<double>& prefix, int pp) {
  const int k = int(pos.size());
  split_result out;
  if (pp < 1 || pp > k - 1) return out;
  auto cost = [&](int a, int b) { return prefix[size_t(pos[b])] - prefix[size_t(pos[a])]; };
  // The optimum lies between the largest single step and the whole; a
  // greedy walk tells whether a bound is reachable in pp stages (fewer
  // stages split further never cost more), so bisect on it.
  double lo = 0, hi = cost(0, k - 1);
  for (int a = 0; a + 1 < k; ++a) lo = std::max(lo, cost(a, a + 1));
  if (stages_needed(pos, prefix, pp, lo) > pp) {
    for (int it = 0; it < 200 && hi > lo; ++it) {
      const double mid = lo + (hi - lo) / 2;
      if (mid <= lo || mid >= hi) break;  // adjacent doubles
      if (stages_needed(pos, prefix, pp, mid) <= pp)
        hi = mid;
      else
        lo = mid;
    }
  } else {
    hi = lo;
  }
  // The split: each stage takes the most positions it can at cost <= hi,
  // leaving one position for each stage after it.
  out.bounds.assign(pp + 1, 0);
  out.max_cost = 0;
  int a = 0;
  for (int st = 1; st <= pp; ++st) {
    int b = a + 1;
    const int room = k - 1 - (pp - st);
    if (st == pp) {
      b = k - 1;
    } else {
      while (b + 1 <= room && cost(a, b + 1) <= hi) ++b;
    }
    out.bounds[st] = pos[b];
    out.max_cost = std::max(out.max_cost, cost(a, b));
    a = b;
  }
  return out;
}

std::vector<int> balanced_stages(const model::graph& g, int pp,
                                 const std::vector<double>& node_cost,
                                 const std::vector<int>* cuts) {
  const int n = int(g.nodes().size());
  MERAK_CHECK(int(node_cost.size()) == n, "{} node costs for {} nodes", node_cost.size(), n);
  if (pp < 1) fail("--pp must be at least 1 (got {})", pp);
  if (pp > n)
    fail("the model graph has {} nodes, so at most {} pipeline stages (--pp {})", n, n, pp);
  std::vector<double> prefix(n + 1, 0);
  double largest = 0;
  for (int i = 0; i < n; ++i) {
    prefix[i + 1] = prefix[i] + node_cost[i];
    largest = std::max(largest, node_cost[i]);
  }
  std::vector<int> pos{0};
  for (int c : cuts ? *cuts : cut_points(g)) pos.push_back(c);
  pos.push_back(n);
  split_result single = min_max_split(pos, prefix, pp);
  // Cuts where one tensor crosses are preferred. Skip connections that span
  // much of the model leave few of them; then cutting between any nodes, the
  // crossing values going along to the next stage as extra tensors, may
  // balance far better. Taken when the single-tensor split's slowest stage
  // is over 1.5x that of the best split at any nodes (never for GPT blocks,
  // which have a single-tensor cut at every residual). Any split is at least
  // max(total / pp, largest node): below 1.5x that, no search is needed.
  const double bound = std::max(prefix[n] / pp, largest);
  if (single.max_cost <= 1.5 * bound) return single.bounds;
  std::vector<int> every(n + 1);
  for (int c = 0; c <= n; ++c) every[c] = c;
  split_result any = min_max_split(every, prefix, pp);
  return single.max_cost > 1.5 * any.max_cost ? any.bounds : single.bounds;
}

}  // namespace merak::partition
