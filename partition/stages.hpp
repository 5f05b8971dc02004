#pragma once
// Contiguous pipeline stages over a model graph.

#include <vector>

#include "model/graph.hpp"

namespace merak::partition {

// Node indices where a stage may begin: every value produced before the cut
// and read after it is a single activation (graph inputs aside), so one
// tensor crosses each boundary.
std::vector<int> cut_points(const model::graph& g);
// crossing[c]: how many values produced before node c are read at or after
// it (c in 1..nodes-1).
std::vector<int> crossing_counts(const model::graph& g);

// Stage s runs nodes [bounds[s], bounds[s+1]). Minimises the largest
// stage's forward FLOPs over the cut points (exact, by dynamic programming).
// Cuts where a single tensor crosses are preferred; when skip connections
// leave too few of them (the best such split's slowest stage over 1.5x that
// of the best split between any nodes), it cuts between any nodes and the
// values that cross go along as extra tensors.
// Throws merak::error naming pp when the graph has fewer than pp nodes.
std::vector<int> balanced_stages(const model::graph& g, int pp);
// The same with a cost per node (e.g. measured forward + backward seconds).
std::vector<int> balanced_stages(const model::graph& g, int pp,
                                 const std::vector<double>& node_cost);

}  // namespace merak::partition
