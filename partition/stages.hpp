#pragma once
// Contiguous pipeline stages over a model graph.

#include <limits>
#include <string_view>
#include <vector>

#include "model/graph.hpp"

namespace merak::partition {

// Node indices where a stage may begin: every value produced before the cut
// and read after it is a single activation (graph inputs aside), so one
// tensor crosses each boundary.
std::vector<int> cut_points(const model::graph& g);
// The transformer block (layer) a node belongs to, as the model families
// name their nodes: GPT's "h<l>.", Llama's "decoder.layers.<l>."; -1 for a
// node outside the blocks (embeddings, the final norm, the head, the loss).
int transformer_block(std::string_view node_name);
// crossing[c]: how many values produced before node c are read at or after
// it (c in 1..nodes-1).
std::vector<int> crossing_counts(const model::graph& g);

struct split_result {
  double max_cost = std::numeric_limits<double>::infinity();  // no split
  std::vector<int> bounds;
};
// The split of [0, pos.back()) into pp stages with boundaries from `pos`
// (pos[0] = 0, increasing) minimising the largest stage cost, a stage
// [a, b) costing prefix[b] - prefix[a] (prefix never decreasing): the
// least bound a greedy walk reaches in pp stages, by bisection to the
// resolution of doubles, then each stage as long as that bound allows.
// O(positions x 64) per bisection step.
split_result min_max_split(const std::vector<int>& pos, const std::vector<double>& prefix, int pp);

// Stage s runs nodes [bounds[s], bounds[s+1]). Minimises the largest
// stage's forward FLOPs over the cut points (exact: min_max_split).
// Cuts where a single tensor crosses are preferred; when skip connections
// leave too few of them (the best such split's slowest stage over 1.5x that
// of the best split between any nodes), it cuts between any nodes and the
// values that cross go along as extra tensors.
// Throws merak::error naming pp when the graph has fewer than pp nodes.
std::vector<int> balanced_stages(const model::graph& g, int pp);
// The same with a cost per node (e.g. measured forward + backward seconds).
// `cuts`: cut_points(g) when the caller has them (null: computed here).
std::vector<int> balanced_stages(const model::graph& g, int pp,
                                 const std::vector<double>& node_cost,
                                 const std::vector<int>* cuts = nullptr);

}  // namespace merak::partition
