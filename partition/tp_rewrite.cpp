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
    g_.set_token_slices(v, tp_);
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

// Vocabulary parallelism: the token embeddings, the output layers whose one
// reader is a cross-entropy over their logits, and those losses. A weight
// that some other node also reads keeps all its nodes whole.
struct vocab_nodes {
  std::vector<int> embeddings, heads, losses;
  bool any() const { return !embeddings.empty() || !heads.empty(); }
};

vocab_nodes find_vocab_nodes(const model::graph& g) {
  auto readers = readers_of(g);
  auto& nodes = g.nodes();
  std::vector<char> in(nodes.size(), 0);
  std::vector<int> loss_of(nodes.size(), -1);
  for (size_t n = 0; n < nodes.size(); ++n) {
    auto& node = nodes[n];
    if (node.tp != tp_split::vocab || node.params.empty()) continue;
    if (node.kind == "embedding") in[n] = 1;
    if (node.kind != "linear") continue;
    auto& r = readers[size_t(node.output)];
    if (r.size() == 1 && nodes[size_t(r[0])].kind == "cross_entropy" &&
        nodes[size_t(r[0])].tp == tp_split::vocab && nodes[size_t(r[0])].inputs[0] == node.output) {
      in[n] = 1;
      loss_of[n] = r[0];
    }
  }
  // Every node reading a sharded table must shard it alike.
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (!in[n]) continue;
    const auto& table = nodes[n].params[0].name;
    for (size_t k = 0; k < nodes.size(); ++k)
      for (size_t q = 0; q < nodes[k].params.size(); ++q)
        if (nodes[k].params[q].name == table && (!in[k] || q != 0)) in[n] = 0;
  }
  vocab_nodes out;
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (!in[n]) continue;
    if (nodes[n].kind == "embedding") {
      out.embeddings.push_back(int(n));
    } else {
      out.heads.push_back(int(n));
      out.losses.push_back(loss_of[n]);
    }
  }
  return out;
}

}  // namespace

std::string tp_divisibility_error(const model::graph& g, int tp) {
  if (tp < 1) return fmt::format("--tp must be at least 1 (got {})", tp);
  for (auto& p : find_pairs(g))
    if (auto e = check_pair(g, p, tp); !e.empty()) return e;
  if (tp > 1) {
    auto v = find_vocab_nodes(g);
    for (auto* list : {&v.embeddings, &v.heads})
      for (int n : *list) {
        const int64_t rows = g.nodes()[size_t(n)].params[0].shape[0];
        if (rows % tp != 0)
          return fmt::format(
              "tp {} does not divide the {} vocabulary rows of '{}' (pad them with "
              "--make-vocab-size-divisible-by)",
              tp, rows, g.nodes()[size_t(n)].name);
      }
  }
  return "";
}

namespace {

class tp_rewriter {
 public:
  tp_rewriter(const model::graph& g, int tp, int rank, bool sequence_parallel)
      : g_(g),
        tp_(tp),
        rank_(rank),
        sp_(sequence_parallel && tp > 1),
        region_(out_.graph, tp, rank) {}

  tp_graph run() {
    plan();
    auto& values = g_.values();
    out_.graph.set_activation_type(g_.activation_type());
    vmap_.assign(values.size(), -1);
    for (int v : g_.inputs())
      vmap_[v] = out_.graph.add_input(values[v].name, values[v].features, values[v].type);
    for (int n = 0; n < int(g_.nodes().size()); ++n) {
      out_.node_map.push_back(int(out_.graph.nodes().size()));
      emit(n);
    }
    out_.node_map.push_back(int(out_.graph.nodes().size()));
    if (g_.loss() >= 0) out_.graph.set_loss(vmap_[g_.loss()]);
    return std::move(out_);
  }

 private:
  enum class role { whole, column, inner, row, vocab_embedding, vocab_head, vocab_loss };

  void plan() {
    const int N = int(g_.nodes().size());
    roles_.assign(N, role::whole);
    splits_.resize(N);
    pair_of_.assign(N, -1);
    column_width_.assign(N, 0);
    if (tp_ == 1) return;
    pairs_ = find_pairs(g_);
    for (size_t i = 0; i < pairs_.size(); ++i) {
      auto& p = pairs_[i];
      roles_[p.column] = role::column;
      splits_[p.column] = column_split(g_, p, tp_, rank_);
      column_width_[p.column] = model::shard_shape(splits_[p.column])[0];
      pair_of_[p.column] = int(i);
      for (int n : p.inner) {
        roles_[n] = role::inner;
        pair_of_[n] = int(i);
      }
      roles_[p.row] = role::row;
    }
    out_.pairs = int(pairs_.size());
    auto v = find_vocab_nodes(g_);
    for (int n : v.embeddings) roles_[n] = role::vocab_embedding;
    for (int n : v.heads) roles_[n] = role::vocab_head;
    for (int n : v.losses) roles_[n] = role::vocab_loss;
  }

  model::param_spec shard(const model::param_spec& spec, model::shard_spec split) const {
    model::param_spec s = spec;
    split.full = spec.shape;
    s.shard = split;
    s.shape = model::shard_shape(split);
    return s;
  }
  model::shard_spec plain(int dim) const {
    model::shard_spec split;
    split.dim = dim;
    split.parts = tp_;
    split.index = rank_;
    return split;
  }
  // x (an input of node `at`) whole on every shard, its gradient summed:
  // tp_copy, or under sequence parallelism sp_gather of its slice.
  int copy_in(int x, const std::string& at) {
    const int C = int(features_of_new(x));
    return sp_ ? model::layers::sp_node(out_.graph, at + ".sp_gather", region_.as_slice(x, at), C,
                                        model::tp_comm::sp_gather, tp_, rank_)
               : model::layers::tp_copy(out_.graph, at + ".tp_copy", x, C);
  }
  // Partial sums y of node `at` summed: tp_reduce, or under sequence
  // parallelism sp_reduce to this shard's slice.
  int sum_out(int y, const std::string& at) {
    const int C = int(features_of_new(y));
    // Under sequence parallelism the whole partial sums are freed once
    // reduce-scattered (model::executor): their producer keeps nothing.
    if (sp_) {
      auto& producer = out_.graph.annotations(out_.graph.values()[size_t(y)].producer);
      producer.activation_bytes_per_token =
          std::max<int64_t>(0, producer.activation_bytes_per_token -
                                   C * int64_t(model::dtype_size(out_.graph.activation_type())));
    }
    return sp_ ? region_.mark(model::layers::sp_node(out_.graph, at + ".sp_reduce", y, C,
                                                     model::tp_comm::sp_reduce, tp_, rank_))
               : model::layers::tp_reduce(out_.graph, at + ".tp_reduce", y, C);
  }
  int64_t features_of_new(int v) const {
    auto& f = out_.graph.values()[size_t(v)].features;
    return f.empty() ? 0 : f.back();
  }

  void emit(int n) {
    auto& orig = g_.nodes()[size_t(n)];
    model::node_info node = orig;
    for (int& v : node.inputs) v = vmap_[v];
    auto feats = g_.values()[size_t(orig.output)].features;
    const auto type = g_.values()[size_t(orig.output)].type;
    bool slice_out = false;
    switch (roles_[n]) {
      case role::whole:
        if (sp_ && acts_per_token(orig)) {  // on the slice of the tokens
          for (int& v : node.inputs) v = region_.as_slice(v, node.name);
          node.sequence_parallel = !node.params.empty();
          node.flops_per_token /= tp_;
          node.activation_bytes_per_token /= tp_;
          slice_out = true;
        } else if (sp_) {
          for (int& v : node.inputs) v = region_.as_whole(v, node.name);
        }
        break;
      case role::column:
        node.inputs[0] = copy_in(node.inputs[0], node.name);
        for (auto& spec : node.params) spec = shard(spec, splits_[n]);
        feats.back() = column_width_[n];
        break;
      case role::inner: {
        const auto& p = pairs_[size_t(pair_of_[n])];
        feats.back() = node.kind == "rope" ? column_width_[p.column] : feats.back() / tp_;
        if (p.kv_heads > 0 && p.kv_heads < tp_ && node.regroup)  // one K/V head per shard
          node.make = node.regroup(p.heads / tp_);
        break;
      }
      case role::row:
        return emit_row(n, std::move(node), feats, type);
      case role::vocab_embedding:
        return emit_vocab_embedding(n, node);
      case role::vocab_head:
        node.inputs[0] = copy_in(node.inputs[0], node.name);
        node.params[0] = shard(node.params[0], plain(0));
        feats.back() /= tp_;
        break;
      case role::vocab_loss: {
        const int64_t Vs = features_of_new(node.inputs[0]);
        vmap_[orig.output] = model::layers::vocab_parallel_cross_entropy(
            out_.graph, orig.name, node.inputs[0], node.inputs[1], int(Vs) * rank_,
            orig.vocab > 0 ? orig.vocab : int(Vs) * tp_, tp_, rank_);
        return;
      }
    }
    if (roles_[n] != role::whole) {
      node.flops_per_token /= tp_;
      node.activation_bytes_per_token /= tp_;
    }
    vmap_[orig.output] = out_.graph.add_node(std::move(node), feats, type);
    if (slice_out) region_.mark(vmap_[orig.output]);
  }

  void emit_row(int n, model::node_info node, model::shape_t feats, model::dtype type) {
    auto& ng = out_.graph;
    const auto& name = g_.nodes()[size_t(n)].name;
    model::param_spec bias;
    const bool has_bias = node.params.size() > 1;
    if (has_bias) {
      bias = node.params[1];
      node.params.pop_back();
    }
    node.params[0] = shard(node.params[0], plain(1));
    node.flops_per_token /= tp_;
    int y = sum_out(ng.add_node(node, feats, type), name);
    if (has_bias) {
      const int C = int(feats.back());
      y = model::layers::bias_add(ng, name + ".bias_add", y, C, bias);
      if (sp_) {  // on the slice: a partial gradient
        auto& added = ng.annotations(int(ng.nodes().size()) - 1);
        added.sequence_parallel = true;
        added.flops_per_token /= tp_;
        added.activation_bytes_per_token /= tp_;
        region_.mark(y);
      }
    }
    vmap_[g_.nodes()[size_t(n)].output] = y;
  }

  // The shard's rows of the table (and the position table, added by shard
  // 0), summed over the shards.
  void emit_vocab_embedding(int n, const model::node_info& node) {
    auto& orig = g_.nodes()[size_t(n)];
    const auto wte = shard(orig.params[0], plain(0));
    const int rows = int(wte.shape[0]);
    const model::param_spec* wpe = orig.params.size() > 1 ? &orig.params[1] : nullptr;
    const int partial =
        model::layers::embedding_shard(out_.graph, orig.name, node.inputs[0],
                                       orig.vocab > 0 ? orig.vocab : rows * tp_, wte, wpe,
                                       rows * rank_, rank_ == 0);
    vmap_[orig.output] = sum_out(partial, orig.name);
  }

  const model::graph& g_;
  const int tp_, rank_;
  const bool sp_;
  tp_graph out_;
  sequence_region region_;
  std::vector<role> roles_;
  std::vector<model::shard_spec> splits_;  // by column node
  std::vector<int> pair_of_;               // by column and inner node
  std::vector<int64_t> column_width_;      // by column node: the shard's output features
  std::vector<pair_info> pairs_;
  std::vector<int> vmap_;
};

}  // namespace

tp_graph rewrite_for_tp(const model::graph& g, int tp, int rank, bool sequence_parallel) {
  if (auto e = tp_divisibility_error(g, tp); !e.empty()) fail("{}", e);
  MERAK_CHECK(rank >= 0 && rank < tp, "tp rank {} of {}", rank, tp);
  return tp_rewriter(g, tp, rank, sequence_parallel).run();
}

}  // namespace merak::partition
