#pragma once
// Contiguous pipeline stages over a model graph.

#include <vector>

#include "model/graph.hpp"

namespace merak::partition {

// Node indices where a stage may begin: every value produced before the cut
// and read after it is a single activation (graph inputs aside), so one
// tensor crosses each boundary.
std::vector<int> cut_points(const model::graph& g);

// Stage s runs nodes [bounds[s], bounds[s+1]). Minimises the largest
// stage's forward FLOPs over the cut points (exact, by dynamic programming).
// Throws merak::error naming pp and the number of cut points when the graph
// cannot be split that many ways.
std::vector<int> balanced_stages(const model::graph& g, int pp);
// The same with a cost per node (e.g. measured forward + backward seconds).
std::vector<int> balanced_stages(const model::graph& g, int pp, const std::vector<double>& node_cost);

}  // namespace merak::partition
