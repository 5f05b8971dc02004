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

std::vector<int> balanced_stages(const model::graph& g, int pp) {
  std::vector<double> flops;
  for (auto& node : g.nodes()) flops.push_back(node.flops_per_token);
  return balanced_stages(g, pp, flops);
}

namespace {

struct split {
  double max_cost = std::numeric_limits<double>::infinity();  // inf: no split
  std::vector<int> bounds;
};

// The split of nodes [0, n) into pp stages at boundaries from `pos` (first 0,
// last n) that minimises the largest stage cost: exact, by dynamic programming.
split best_split(const std::vector<int>& pos, const std::vector<double>& prefix, int pp) {
  const int k = int(pos.size());
  split out;
  if (pp > k - 1) return out;
  auto cost = [&](int a, int b) { return prefix[size_t(pos[b])] - prefix[size_t(pos[a])]; };
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][j]: smallest max-stage cost covering pos[0..j] with s stages.
  std::vector<std::vector<double>> best(pp + 1, std::vector<double>(k, inf));
  std::vector<std::vector<int>> from(pp + 1, std::vector<int>(k, -1));
  best[0][0] = 0;
  for (int s = 1; s <= pp; ++s)
    for (int j = 1; j < k; ++j)
      for (int i = s - 1; i < j; ++i) {
        if (best[s - 1][i] == inf) continue;
        double c = std::max(best[s - 1][i], cost(i, j));
        if (c < best[s][j]) {
          best[s][j] = c;
          from[s][j] = i;
        }
      }
  out.max_cost = best[pp][k - 1];
  out.bounds.assign(pp + 1, 0);
  int j = k - 1;
  for (int s = pp; s >= 1; --s) {
    out.bounds[s] = pos[j];
    j = from[s][j];
  }
  return out;
}

}  // namespace

std::vector<int> balanced_stages(const model::graph& g, int pp,
                                 const std::vector<double>& node_cost) {
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
  for (int c : cut_points(g)) pos.push_back(c);
  pos.push_back(n);
  split single = best_split(pos, prefix, pp);
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
  split any = best_split(every, prefix, pp);
  return single.max_cost > 1.5 * any.max_cost ? any.bounds : single.bounds;
}

}  // namespace merak::partition
