#include "model/graph.hpp"

#include <set>

#include "core/error.hpp"

namespace merak::model {

const char* tp_split_name(tp_split s) {
  switch (s) {
    case tp_split::replicated:
      return "replicated";
    case tp_split::column:
      return "column";
    case tp_split::row:
      return "row";
    case tp_split::heads:
      return "heads";
    case tp_split::vocab:
      return "vocab";
  }
  return "?";
}

void graph::set_activation_type(dtype t) {
  if (t != dtype::f32 && t != dtype::bf16)
    fail("activations must be F32 or BF16, not {}", dtype_name(t));
  activation_type_ = t;
}

int graph::add_input(std::string name, shape_t features, dtype type) {
  if (find_value(name) >= 0) fail("graph value '{}' defined twice", name);
  values_.push_back({std::move(name), std::move(features), type, -1});
  inputs_.push_back(int(values_.size()) - 1);
  return int(values_.size()) - 1;
}

int graph::add_node(node_info node, shape_t out_features, dtype out_type) {
  for (int v : node.inputs)
    if (v < 0 || v >= int(values_.size()))
      fail("node '{}' takes value {} which does not exist", node.name, v);
  if (!node.make) fail("node '{}' has no layer factory", node.name);
  values_.push_back({node.name, std::move(out_features), out_type, int(nodes_.size())});
  node.output = int(values_.size()) - 1;
  nodes_.push_back(std::move(node));
  return nodes_.back().output;
}

int graph::find_value(const std::string& name) const {
  for (size_t i = 0; i < values_.size(); ++i)
    if (values_[i].name == name) return int(i);
  return -1;
}

range_boundary graph::boundary(int first, int last) const {
  std::set<int> in, out;
  for (int n = first; n < last; ++n)
    for (int v : nodes_[n].inputs)
      if (values_[v].producer < first) in.insert(v);
  for (int n = last; n < int(nodes_.size()); ++n)
    for (int v : nodes_[n].inputs) {
      int p = values_[v].producer;
      if (p >= first && p < last) out.insert(v);
    }
  return {{in.begin(), in.end()}, {out.begin(), out.end()}};
}

int64_t graph::parameter_count() const {
  std::set<std::string> seen;
  int64_t n = 0;
  for (auto& node : nodes_)
    for (auto& p : node.params)
      if (seen.insert(p.name).second) n += shape_numel(p.shape);
  return n;
}

double graph::flops_per_token() const {
  double f = 0;
  for (auto& node : nodes_) f += node.flops_per_token;
  return f;
}

int64_t graph::activation_bytes_per_token() const {
  int64_t b = 0;
  for (auto& node : nodes_) b += node.activation_bytes_per_token;
  return b;
}

std::map<int, int> regathered_inputs(const graph& g, int first, int last) {
  const auto& nodes = g.nodes();
  std::map<int, int> out;
  for (int n = first; n < last; ++n) {
    if (nodes[size_t(n)].comm != tp_comm::sp_gather) continue;
    std::vector<int> readers;
    for (int k = 0; k < int(nodes.size()); ++k)
      for (int v : nodes[size_t(k)].inputs)
        if (v == nodes[size_t(n)].output) readers.push_back(k);
    if (readers.size() == 1 && readers[0] > n && readers[0] < last) out[readers[0]] = n;
  }
  return out;
}

}  // namespace merak::model
