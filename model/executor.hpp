#pragma once
// Runs a model graph forward and backward on the host, one micro-batch at a
// time. This is the single-device reference every parallel configuration is
// checked against; a pipeline stage runs the same code on its node range.
//
// Not thread-safe: one owner calls forward/backward in turn. Kernels use the
// OpenMP thread count (set_compute_threads).

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/graph.hpp"
#include "model/tensor_pool.hpp"

namespace merak::model {

class executor {
 public:
  // Materialises every node of `g`, taking parameters from `store` (created
  // on first use). The graph must outlive the executor.
  executor(const graph& g, parameter_store& store);

  // Runs every node forward on the graph inputs (moved in, in the order of
  // graph::inputs()) and keeps what backward needs. Returns the mean of the
  // per-token losses. Throws merak::error on bad inputs (shapes, ids).
  double forward(std::vector<tensor> inputs);

  // Accumulates into the parameter gradients the gradient of
  // scale * mean loss of the last forward, then frees its activations.
  void backward(float scale = 1.0f);

  // forward() without keeping activations: the mean loss only.
  double evaluate(std::vector<tensor> inputs);

  // Per layer kind, seconds spent in forward and backward since profiling
  // was switched on (timing costs two clock reads per node).
  struct kind_time {
    double forward_s = 0, backward_s = 0;
  };
  void set_profiling(bool on) { profiling_ = on; }
  const std::map<std::string, kind_time>& profile() const { return profile_; }

  const graph& model_graph() const { return graph_; }
  // Bytes held by live activations plus the pool's cache.
  int64_t activation_bytes() const;

 private:
  void release_all();

  const graph& graph_;
  std::vector<std::unique_ptr<layer>> layers_;  // one per node
  std::vector<tensor> values_;                  // one per graph value
  std::vector<stash> stashes_;                  // one per node
  tensor_pool pool_;
  bool has_forward_ = false;
  bool profiling_ = false;
  std::map<std::string, kind_time> profile_;
};

}  // namespace merak::model
