#pragma once
// The model graph (the "proxy graph").
//
// Layers are nodes and tensors are edges ("values"). A graph is built
// without allocating any parameter: each node records its parameter specs,
// its forward FLOPs and activation bytes per token, and how tensor
// parallelism may split it, plus a factory that materialises the layer when
// an executor (or a pipeline stage) takes that node. The partitioner and the
// planner read graphs; executors run a range of their nodes.
//
// Values are B x T x features: a value records only its feature shape (and
// element type); B and T are chosen when the graph runs. Nodes are kept in
// topological order (a node's inputs are graph inputs or earlier outputs).

#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/layer.hpp"

namespace merak::model {

// How tensor parallelism may split a node (Megatron-style).
enum class tp_split : uint8_t {
  replicated,  // every shard runs the whole node (layer norm, residual)
  column,      // Y = X A, A split by columns: output features split
  row,         // Y = X A, A split by rows: input features split, output summed
  heads,       // attention: heads split across shards
  vocab,       // token embedding, output layer, loss: the vocabulary split
};
const char* tp_split_name(tp_split s);

// Tensor-parallel communication a node stands for (inserted by the TP
// rewrite, partition/tp_rewrite.hpp). The layer itself is the identity; the
// executor sums over the TP group: Megatron's conjugate pair.
//
// Sequence parallelism (--sequence-parallel) splits the values between the
// column/row pairs over the shards: a whole (B, T, C) value is viewed as
// its B*T*C elements in tp equal slices, shard k holding slice k as a
// (B, T/tp, C) tensor (only nodes that act per token read such values).
enum class tp_comm : uint8_t {
  none,
  copy,       // "f": identity forward, all-reduce of the gradient in backward
  reduce,     // "g": all-reduce of the output in forward, identity backward
  sp_gather,  // "f" under SP: all-gather of the slices forward, reduce-scatter backward
  sp_reduce,  // "g" under SP: reduce-scatter of the partial sums forward, all-gather backward
  sp_enter,   // a whole value's own slice forward; all-gather of the gradient backward
  sp_exit,    // all-gather of the slices forward; the gradient's own slice backward
};

struct value_info {
  std::string name;
  shape_t features;  // per-token shape, e.g. {C}; {} for token ids
  dtype type = dtype::f32;
  int producer = -1;  // node index, or -1 for a graph input
  // Sequence parallelism: a shard holds 1/token_slices of the value's
  // tokens (its slice); 1 for a whole value.
  int token_slices = 1;
};

using layer_factory = std::function<std::unique_ptr<layer>(std::span<const parameter_ptr>)>;

struct node_info {
  std::string name;  // "h0.attn.qkv"
  std::string kind;  // "linear", "attention", ...
  std::vector<int> inputs;
  int output = -1;
  std::vector<param_spec> params;
  double flops_per_token = 0;              // forward
  int64_t activation_bytes_per_token = 0;  // output + stash
  tp_split tp = tp_split::replicated;
  tp_comm comm = tp_comm::none;
  int heads = 0;  // attention heads (tensor parallelism splits them), else 0
  // Grouped-query attention and rotary nodes over a fused [Q | K | V]: the
  // K/V heads (0: as many as `heads`), and the factory of the same layer
  // for a shard holding `per_group` query heads per K/V head (the TP
  // rewrite's shard when K/V heads are replicated: fewer groups than shards).
  int kv_heads = 0;
  // Token embeddings and the loss over a padded vocabulary: the token ids
  // (the rows and logits past them are padding), 0 elsewhere.
  int vocab = 0;
  std::function<layer_factory(int per_group)> regroup;
  // Sequence parallelism: the node acts on its shard's slice of the tokens,
  // so its parameters' gradients are partial sums, added over the TP group
  // after each backward.
  bool sequence_parallel = false;
  layer_factory make;
};

struct range_boundary {
  std::vector<int> inputs;   // values read by nodes [first, last) but produced before
  std::vector<int> outputs;  // values produced there and read by a later node
};

class graph {
 public:
  // Adds a graph input and returns its value id.
  int add_input(std::string name, shape_t features, dtype type);
  // Adds a node whose inputs are existing values; returns its output value.
  int add_node(node_info node, shape_t out_features, dtype out_type = dtype::f32);
  // Element type of the activations the layer builders (layers.hpp) create
  // from now on: f32 (the default) or bf16 (mixed precision: parameters,
  // their gradients, statistics and losses stay f32).
  void set_activation_type(dtype t);
  dtype activation_type() const { return activation_type_; }
  // Marks the value that holds per-token losses (B, T).
  void set_loss(int value) { loss_ = value; }
  // Marks a value a shard holds as 1/slices of its tokens (value_info).
  void set_token_slices(int value, int slices) { values_.at(size_t(value)).token_slices = slices; }

  const std::vector<node_info>& nodes() const { return nodes_; }
  // A node's annotations (costs, tensor-parallel marks) for a rewrite to
  // adjust; its inputs and output stay as added.
  node_info& annotations(int node) { return nodes_.at(size_t(node)); }
  const std::vector<value_info>& values() const { return values_; }
  const std::vector<int>& inputs() const { return inputs_; }
  int loss() const { return loss_; }
  int find_value(const std::string& name) const;  // -1 if absent
  // What crosses into and out of the node range [first, last), ascending ids.
  range_boundary boundary(int first, int last) const;

  // Parameter count with tied parameters counted once.
  int64_t parameter_count() const;
  // Forward FLOPs per token of all nodes.
  double flops_per_token() const;
  int64_t activation_bytes_per_token() const;

 private:
  std::vector<node_info> nodes_;
  std::vector<value_info> values_;
  std::vector<int> inputs_;
  int loss_ = -1;
  dtype activation_type_ = dtype::f32;
};

// Sequence parallelism: the sp_gather nodes of [first, last) whose whole
// output has a single reader in the range (a column-parallel linear), keyed
// by that reader. The runtime frees such a whole value once its reader ran
// forward and gathers it again from this shard's slice where the reader's
// gradients need it (model::executor).
std::map<int, int> regathered_inputs(const graph& g, int first, int last);

}  // namespace merak::model
