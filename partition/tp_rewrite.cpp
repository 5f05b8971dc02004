#include "partition/tp_rewrite.hpp"

#include <fmt/format.h>

#include <map>

#include "core/error.hpp"
#include "model/layers.hpp"

namespace merak::partition {
namespace {

using model::tp_split;

// Consumers of each value.
std::vector<std::vector<int>> readers_of(const model::graph& g) {
  std::vector<std::vector<int>> r(g.values().size());
  for (size_t n = 0; n < g.nodes().size(); ++n)
    for (int v : g.nodes()[n].inputs) r[v].push_back(int(n));
  return r;
}

struct pair_info {
  int column = -1, row = -1;
  std::vector<int> inner;  // nodes between them (per feature / per head)
  int heads = 0;     // query heads of the attention inside (0: none)
  int kv_heads = 0;  // its K/V heads, when a grouped [Q | K | V] (else 0)
  bool glu = false;  // a gated unit inside: the column's output is [gate | up]
};

// Column -> (attention | rotary | single-input per-feature node)* -> row,
// each link the only reader of the value before it.
std::vector<pair_info> find_pairs(const model::graph& g) {
  auto readers = readers_of(g);
  std::vector<pair_info> pairs;
  auto& nodes = g.nodes();
  for (size_t c = 0; c < nodes.size(); ++c) {
    if (nodes[c].tp != tp_split::column || nodes[c].kind != "linear") continue;
    pair_info p;
    p.column = int(c);
    int v = nodes[c].output;
    while (readers[v].size() == 1) {
      int n = readers[v][0];
      auto& node = nodes[n];
      if (node.tp == tp_split::row && node.kind == "linear") {
        p.row = n;
        break;
      }
      const bool elementwise = node.inputs.size() == 1 && node.params.empty() &&
                               (node.kind == "gelu" || node.kind == "swiglu");
      if (node.tp != tp_split::heads && !elementwise) break;
      if (node.tp == tp_split::heads) {
        p.heads = node.heads;
        if (node.kv_heads > 0 && node.kv_heads != node.heads) p.kv_heads = node.kv_heads;
      }
      p.glu = p.glu || node.kind == "swiglu";
      p.inner.push_back(n);
      v = node.output;
    }
    if (p.row >= 0) pairs.push_back(std::move(p));
  }
  return pairs;
}

// How the column's weight splits by rows: [Q | K | V] per head, [gate | up]
// per feature, or plainly.
model::shard_spec column_split(const model::graph& g, const pair_info& p, int tp, int rank) {
  model::shard_spec s;
  s.dim = 0;
  s.parts = tp;
  s.index = rank;
  s.full = g.nodes()[size_t(p.column)].params[0].shape;
  if (p.kv_heads > 0) {
    s.blocks = {p.heads, p.kv_heads, p.kv_heads};
    s.unit = s.full[0] / (p.heads + 2 * p.kv_heads);
  } else {
    s.groups = p.heads > 0 ? 3 : p.glu ? 2 : 1;
  }
  return s;
}

std::string check_pair(const model::graph& g, const pair_info& p, int tp) {
  auto& nodes = g.nodes();
  auto& col = nodes[p.column];
  const int64_t out = col.params[0].shape[0];
  if (p.heads > 0 && p.heads % tp != 0)
    return fmt::format("tp {} does not divide the {} attention heads after '{}'", tp, p.heads,
                       col.name);
  if (p.kv_heads > 0) {
    if (p.kv_heads % tp != 0 && tp % p.kv_heads != 0)
      return fmt::format(
          "tp {} and the {} query groups after '{}' (--num-query-groups): one must divide the "
          "other",
          tp, p.kv_heads, col.name);
    if (out % (p.heads + 2 * p.kv_heads) != 0)
      return fmt::format("'{}' has {} outputs, not [Q | K | V] of {} + 2 x {} heads", col.name,
                         out, p.heads, p.kv_heads);
    return "";
  }
  const int groups = p.heads > 0 ? 3 : p.glu ? 2 : 1;
  if (out % (int64_t(groups) * tp) != 0)
    return fmt::format("tp {} does not divide the {} output features of '{}'", tp, out / groups,
                       col.name);
  return "";
}

// Sequence parallelism in the graph being built: which of its values are
// slices, and the slice (sp_enter) or whole (sp_exit) made of a value, made
// once each and reused by every later reader.
class sequence_region {
 public:
  sequence_region(model::graph& g, int tp, int rank) : g_(g), tp_(tp), rank_(rank) {}
  int mark(int v) {
    if (sliced_.size() <= size_t(v)) sliced_.resize(size_t(v) + 1, 0);
    sliced_[size_t(v)] = 1;
    return v;
  }
  // v's slice (v itself when it is one); `at` names the reader.
  int as_slice(int v, const std::string& at) {
    if (sliced(v)) return v;
    if (auto it = entered_.find(v); it != entered_.end()) return it->second;
    return entered_[v] = mark(make(v, ".sp_enter." + at, model::tp_comm::sp_enter));
  }
  // v whole (v itself when it is).
  int as_whole(int v, const std::string& at) {
    if (!sliced(v)) return v;
    if (auto it = exited_.find(v); it != exited_.end()) return it->second;
    return exited_[v] = make(v, ".sp_exit." + at, model::tp_comm::sp_exit);
  }

 private:
  bool sliced(int v) const { return size_t(v) < sliced_.size() && sliced_[size_t(v)]; }
  int make(int v, const std::string& suffix, model::tp_comm comm) {
    const auto& info = g_.values()[size_t(v)];
    return model::layers::sp_node(g_, info.name + suffix, v, int(info.features.back()), comm, tp_,
                                  rank_);
  }
  model::graph& g_;
  int tp_, rank_;
  std::vector<char> sliced_;
  std::map<int, int> entered_, exited_;
};

// Nodes that act on each token alone: under sequence parallelism they run on
// the shard's slice of the tokens.
bool acts_per_token(const model::node_info& n) {
  return n.kind == "layernorm" || n.kind == "rmsnorm" || n.kind == "residual" || n.kind == "bias" ||
         n.kind == "gelu";
}

}  // namespace

std::string tp_divisibility_error(const model::graph& g, int tp) {
  if (tp < 1) return fmt::format("--tp must be at least 1 (got {})", tp);
  for (auto& p : find_pairs(g))
    if (auto e = check_pair(g, p, tp); !e.empty()) return e;
  return "";
}

tp_graph rewrite_for_tp(const model::graph& g, int tp, int rank, bool sequence_parallel) {
  if (auto e = tp_divisibility_error(g, tp); !e.empty()) fail("{}", e);
  MERAK_CHECK(rank >= 0 && rank < tp, "tp rank {} of {}", rank, tp);
  auto& nodes = g.nodes();
  auto& values = g.values();
  const int N = int(nodes.size());
  enum class role { whole, column, inner, row };
  std::vector<role> roles(N, role::whole);
  std::vector<model::shard_spec> splits(N);  // by column node
  std::vector<int> pair_of(N, -1);           // by column and inner node
  std::vector<int64_t> column_width(N, 0);   // by column node: the shard's output features
  auto pairs = tp > 1 ? find_pairs(g) : std::vector<pair_info>{};
  for (size_t i = 0; i < pairs.size(); ++i) {
    auto& p = pairs[i];
    roles[p.column] = role::column;
    splits[p.column] = column_split(g, p, tp, rank);
    column_width[p.column] = model::shard_shape(splits[p.column])[0];
    pair_of[p.column] = int(i);
    for (int n : p.inner) {
      roles[n] = role::inner;
      pair_of[n] = int(i);
    }
    roles[p.row] = role::row;
  }
  const int npairs = int(pairs.size());
  tp_graph out;
  out.pairs = npairs;
  auto& ng = out.graph;
  ng.set_activation_type(g.activation_type());
  std::vector<int> vmap(values.size(), -1);
  for (int v : g.inputs())
    vmap[v] = ng.add_input(values[v].name, values[v].features, values[v].type);
  auto shard = [&](const model::param_spec& spec, model::shard_spec split) {
    model::param_spec s = spec;
    split.full = spec.shape;
    s.shard = split;
    s.shape = model::shard_shape(split);
    return s;
  };
  auto plain = [&](int dim) {
    model::shard_spec split;
    split.dim = dim;
    split.parts = tp;
    split.index = rank;
    return split;
  };
  auto features_of = [&](int v) {
    return values[v].features.empty() ? 0 : values[v].features.back();
  };
  const bool sp = sequence_parallel && tp > 1;
  sequence_region region{ng, tp, rank};
  for (int n = 0; n < N; ++n) {
    out.node_map.push_back(int(ng.nodes().size()));
    model::node_info node = nodes[n];
    for (int& v : node.inputs) v = vmap[v];
    auto feats = values[node.output].features;
    bool slice_out = false;
    switch (roles[n]) {
      case role::whole:
        if (sp && acts_per_token(nodes[n])) {  // on the slice of the tokens
          for (int& v : node.inputs) v = region.as_slice(v, node.name);
          node.sequence_parallel = !node.params.empty();
          node.flops_per_token /= tp;
          node.activation_bytes_per_token /= tp;
          slice_out = true;
        } else if (sp) {
          for (int& v : node.inputs) v = region.as_whole(v, node.name);
        }
        break;
      case role::column: {
        int64_t C = features_of(nodes[n].inputs[0]);
        node.inputs[0] =
            sp ? model::layers::sp_node(ng, node.name + ".sp_gather",
                                        region.as_slice(node.inputs[0], node.name), int(C),
                                        model::tp_comm::sp_gather, tp, rank)
               : model::layers::tp_copy(ng, node.name + ".tp_copy", node.inputs[0], int(C));
        for (auto& spec : node.params) spec = shard(spec, splits[n]);
        feats.back() = column_width[n];
        break;
      }
      case role::inner: {
        const auto& p = pairs[size_t(pair_of[n])];
        feats.back() = node.kind == "rope" ? column_width[p.column] : feats.back() / tp;
        if (p.kv_heads > 0 && p.kv_heads < tp && node.regroup)  // one K/V head per shard
          node.make = node.regroup(p.heads / tp);
        break;
      }
      case role::row: {
        model::param_spec bias;
        bool has_bias = node.params.size() > 1;
        if (has_bias) {
          bias = node.params[1];
          node.params.pop_back();
        }
        node.params[0] = shard(node.params[0], plain(1));
        node.flops_per_token /= tp;
        int partial = ng.add_node(node, feats, values[nodes[n].output].type);
        int C = int(feats.back());
        int y = sp ? region.mark(model::layers::sp_node(ng, nodes[n].name + ".sp_reduce", partial,
                                                        C, model::tp_comm::sp_reduce, tp, rank))
                   : model::layers::tp_reduce(ng, nodes[n].name + ".tp_reduce", partial, C);
        if (has_bias) {
          y = model::layers::bias_add(ng, nodes[n].name + ".bias_add", y, C, bias);
          if (sp) {  // on the slice: a partial gradient
            auto& added = ng.annotations(int(ng.nodes().size()) - 1);
            added.sequence_parallel = true;
            added.flops_per_token /= tp;
            added.activation_bytes_per_token /= tp;
            region.mark(y);
          }
        }
        vmap[nodes[n].output] = y;
        continue;
      }
    }
    if (roles[n] != role::whole) {
      node.flops_per_token /= tp;
      node.activation_bytes_per_token /= tp;
    }
    vmap[nodes[n].output] = ng.add_node(std::move(node), feats, values[nodes[n].output].type);
    if (slice_out) region.mark(vmap[nodes[n].output]);
  }
  out.node_map.push_back(int(ng.nodes().size()));
  if (g.loss() >= 0) ng.set_loss(vmap[g.loss()]);
  return out;
}

}  // namespace merak::partition
