#pragma once
// Tensor-parallel rewrite of a model graph (Megatron-style), by pattern.
//
// A column-parallel linear followed, through nodes that act per feature or
// per head (attention, GELU), by a row-parallel linear forms a pair:
//
//   x -> [tp_copy] -> column linear (Y = XA, A split by columns: each shard
//        computes its slice of the features / its heads) -> ... ->
//        row linear (Y = XA, A split by rows, no bias: partial sums) ->
//        [tp_reduce] -> bias -> y
//
// tp_copy is identity forward / all-reduce backward, tp_reduce the reverse
// (the conjugate pair); the row layer's bias is added once, after the sum.
// A column node whose output feeds attention (a fused QKV) is split per
// head: [Q | K | V] blocks, K/V heads replicated where the groups divide tp;
// one that feeds SwiGLU per half ([gate | up]).
//
// The vocabulary is split too (Megatron's vocabulary parallelism): each
// shard holds V/tp rows of the token embedding (its partial lookups summed
// by a tp_reduce) and of the output layer (after a tp_copy), and the loss
// is vocab_parallel_cross_entropy, so no shard forms the whole logits. A
// table some other node reads stays whole. Nodes outside a pair (layer
// norms, residuals) stay whole on every shard.
//
// With sequence parallelism the nodes between the pairs that act per token
// (norms, residuals, biases) run on the shard's slice of the tokens
// (model::tp_comm): tp_copy becomes sp_gather and tp_reduce sp_reduce; a
// whole value entering that region passes sp_enter, a slice leaving it for
// a node that needs every token (the LM head) sp_exit. Those nodes' own
// parameters are marked sequence_parallel (their gradients are partial).
//
// Parameters keep their names; a shard's param_spec records its slice
// (shard_spec), so shards initialise from the single-device values and
// checkpoints gather them back.

#include <string>
#include <vector>

#include "model/graph.hpp"

namespace merak::partition {

struct tp_graph {
  model::graph graph;
  // node_map[n]: index in `graph` of the first node emitted for node n of
  // the original (size: original nodes + 1, the last entry the new count),
  // so stage bounds found on the original map to the rewrite.
  std::vector<int> node_map;
  int pairs = 0;  // column/row pairs split
};

// The rewrite for shard `rank` of `tp`. tp = 1 returns a copy. Throws
// merak::error naming the node and the size when a split does not divide
// (heads by tp, features by tp).
tp_graph rewrite_for_tp(const model::graph& g, int tp, int rank, bool sequence_parallel = false);

// Checks without rewriting; returns "" when every pair divides by tp, else
// the first rule that fails, by name.
std::string tp_divisibility_error(const model::graph& g, int tp);

}  // namespace merak::partition
