#pragma once
// Data-parallel gradient buckets: which parameters' gradients go to the
// reducer together, and when. Pure bookkeeping over parameter indices; the
// stage actor copies the gradients and hands each bucket to its reducer.
//
// During the last micro-batch's backward a parameter's gradient is final
// once the backward of the first node (in forward order) that uses it has
// run; backward visits nodes in reverse, so buckets fill from the stage's
// last layers to its first and each leaves while the rest of backward runs.
// Every replica makes the same buckets in the same order (the reducers match
// them by tag), since the order depends only on the graph.

#include <cstdint>
#include <string>
#include <vector>

#include "model/graph.hpp"

namespace merak::model {

struct grad_bucket {
  std::vector<int> params;  // parameter indices, in the order they became final
  bool sparse = false;      // the one parameter reduced alone, through the sparse codec
};

class grad_bucketer {
 public:
  // param_bytes[i]: gradient bytes of parameter i; final_after[k]: the
  // parameters whose gradients are final once node k of the stage (0-based,
  // forward order) finished backward; `sparse`: the parameter reduced alone
  // (-1: none); a bucket leaves once it holds bucket_bytes or more.
  // `alone`: parameters that also go in a dense bucket by themselves (the
  // tied weights under gradient shards, reduced whole while the rest is
  // reduce-scattered). `late_nodes[k]` (empty: none): node k's gradients
  // are final only at the end of backward (the sequence-parallel region's,
  // after the TP sums); a bucket never mixes their parameters with the
  // others', so the buckets a distributed optimizer gathers per node keep
  // the layers' weights apart from the norms that every layer reads.
  grad_bucketer(std::vector<int64_t> param_bytes, std::vector<std::vector<int>> final_after,
                int sparse, int64_t bucket_bytes, const std::vector<int>& alone = {},
                const std::vector<char>& late_nodes = {});

  // A new step: no parameter is in a bucket.
  void begin_step();
  // Node k's backward of the last micro-batch finished: the buckets that
  // are ready now.
  std::vector<grad_bucket> node_finished(int k);
  // Backward is done: every parameter not yet in a bucket, in the last
  // buckets. Throws merak::error naming a parameter no node finished.
  std::vector<grad_bucket> finish();

  int buckets_this_step() const { return shipped_; }

 private:
  void take(int p, std::vector<grad_bucket>& out);
  void ship_open(std::vector<grad_bucket>& out);

  std::vector<int64_t> bytes_;
  std::vector<std::vector<int>> final_after_;
  int sparse_;
  int64_t limit_;
  std::vector<bool> alone_;
  std::vector<bool> late_;  // per parameter: final with a late node
  bool open_late_ = false;  // the open bucket holds late parameters
  std::vector<bool> in_bucket_;
  std::vector<int> open_;
  int64_t open_bytes_ = 0;
  int shipped_ = 0;
};

// Per node of [first, last) of g (0 = first): whether its parameters'
// gradients are final only after the tensor-parallel sums that end a
// backward (with `tensor_parallel`, the sequence-parallel region's nodes
// that hold parameters).
std::vector<char> late_gradient_nodes(const graph& g, int first, int last, bool tensor_parallel);

// The order a backward reports a range's `nodes` nodes finished (indices,
// 0 = first; `late` and `deferred` flags per node, empty: none): from the
// last node back, the late nodes after the others, the deferred (split
// weight gradients, finished by the weight backward) after those, each in
// reverse.
std::vector<int> backward_finish_order(int nodes, const std::vector<char>& late,
                                       const std::vector<char>& deferred);

// final_after for nodes [first, last) of g and the stage's parameters by
// name (store order): each parameter goes to the first node that uses it.
std::vector<std::vector<int>> gradients_final_after(const model::graph& g, int first, int last,
                                                    const std::vector<std::string>& params);

}  // namespace merak::model
