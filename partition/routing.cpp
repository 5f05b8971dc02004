#include "partition/routing.hpp"

#include <map>
#include <set>

#include <fmt/format.h>

#include "core/error.hpp"

namespace merak::partition {

std::vector<stage_route> route(const model::graph& g, const std::vector<int>& bounds) {
  const int nodes = int(g.nodes().size());
  bool ok = bounds.size() >= 2 && bounds.front() == 0 && bounds.back() == nodes;
  for (size_t s = 1; ok && s < bounds.size(); ++s) ok = bounds[s - 1] < bounds[s];
  if (!ok)
    fail("stage bounds [{}] do not cut the model's {} nodes into non-empty stages",
         fmt::join(bounds, ", "), nodes);
  const int P = int(bounds.size()) - 1;
  std::vector<int> stage_of_node(size_t(nodes), 0);
  for (int s = 0; s < P; ++s)
    for (int n = bounds[s]; n < bounds[s + 1]; ++n) stage_of_node[size_t(n)] = s;
  // Holders of each parameter, in stage order.
  std::map<std::string, std::vector<int>> holders;
  for (int s = 0; s < P; ++s) {
    std::set<std::string> seen;
    for (int n = bounds[s]; n < bounds[s + 1]; ++n)
      for (auto& spec : g.nodes()[size_t(n)].params)
        if (seen.insert(spec.name).second) holders[spec.name].push_back(s);
  }
  std::vector<stage_route> out(static_cast<size_t>(P));
  for (int s = 0; s < P; ++s) {
    auto& r = out[size_t(s)];
    auto [ins, outs] = g.boundary(bounds[s], bounds[s + 1]);
    for (int v : ins) {
      const int producer = g.values()[size_t(v)].producer;
      r.input_producer.push_back(producer < 0 ? -1 : stage_of_node[size_t(producer)]);
      if (producer < 0) r.graph_inputs.push_back(v);
    }
    for (int v : outs) {
      std::set<int> readers;
      for (int n = bounds[s + 1]; n < nodes; ++n)
        for (int in : g.nodes()[size_t(n)].inputs)
          if (in == v) readers.insert(stage_of_node[size_t(n)]);
      r.output_readers.emplace_back(readers.begin(), readers.end());
    }
    for (auto& [name, hs] : holders)
      if (hs.size() > 1 && std::find(hs.begin(), hs.end(), s) != hs.end())
        r.ties.push_back({name, hs.front(), hs});
  }
  return out;
}

}  // namespace merak::partition
