#include "partition/stages.hpp"

#include <algorithm>
#include <limits>

#include "core/error.hpp"

namespace merak::partition {

std::vector<int> cut_points(const model::graph& g) {
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
  std::vector<int> cuts;
  int crossing = 0;
  for (int c = 1; c < n; ++c) {
    crossing += delta[c];
    if (crossing == 1) cuts.push_back(c);
  }
  return cuts;
}

std::vector<int> balanced_stages(const model::graph& g, int pp) {
  std::vector<double> flops;
  for (auto& node : g.nodes()) flops.push_back(node.flops_per_token);
  return balanced_stages(g, pp, flops);
}

std::vector<int> balanced_stages(const model::graph& g, int pp,
                                 const std::vector<double>& node_cost) {
  const int n = int(g.nodes().size());
  MERAK_CHECK(int(node_cost.size()) == n, "{} node costs for {} nodes", node_cost.size(), n);
  if (pp < 1) fail("--pp must be at least 1 (got {})", pp);
  std::vector<int> pos{0};
  for (int c : cut_points(g)) pos.push_back(c);
  pos.push_back(n);
  const int k = int(pos.size());  // candidate boundaries, first 0, last n
  if (pp > k - 1)
    fail("the model can be split into at most {} pipeline stages (--pp {})", k - 1, pp);
  std::vector<double> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + node_cost[i];
  auto cost = [&](int a, int b) { return prefix[pos[b]] - prefix[pos[a]]; };
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
  std::vector<int> bounds(pp + 1);
  int j = k - 1;
  for (int s = pp; s >= 1; --s) {
    bounds[s] = pos[j];
    j = from[s][j];
  }
  bounds[0] = 0;
  return bounds;
}

}  // namespace merak::partition
