#pragma once
// Where each stage's tensors come from and go to: the routing of a model
// graph cut into pipeline stages. Pure: the stage actors are wired from it.

#include <string>
#include <vector>

#include "model/graph.hpp"

namespace merak::partition {

// A parameter held by several stages (a tied weight: the token embedding and
// the LM head): who owns it (the first holder; it sums the gradients) and
// every holder, in stage order.
struct tied_param {
  std::string name;
  int owner = 0;
  std::vector<int> holders;
  bool operator==(const tied_param&) const = default;
};

struct stage_route {
  // Parallel to graph.boundary(first, last).inputs: the stage that produces
  // each input, -1 for a graph input (the coordinator sends it).
  std::vector<int> input_producer;
  // Parallel to graph.boundary(first, last).outputs: the later stages that
  // read each output, ascending.
  std::vector<std::vector<int>> output_readers;
  // Graph inputs (value ids: tokens, targets) this stage reads.
  std::vector<int> graph_inputs;
  // The tied parameters this stage holds.
  std::vector<tied_param> ties;
};

// One route per stage of `g` cut at `bounds` (stage s holds nodes
// [bounds[s], bounds[s+1])). Throws merak::error for bounds that do not cut
// the whole graph into non-empty increasing ranges.
std::vector<stage_route> route(const model::graph& g, const std::vector<int>& bounds);

}  // namespace merak::partition
