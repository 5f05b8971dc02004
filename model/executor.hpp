#pragma once
// Runs a range of a model graph's nodes forward and backward on the host,
// micro-batch by micro-batch. The whole graph on one device is the
// reference run; a pipeline stage runs its node range with the same code.
//
// A stage's inputs are the values its nodes read but do not produce (graph
// inputs such as token ids, or activations from an earlier stage); its
// outputs are the values it produces that later nodes read. Several
// micro-batches may be in flight, each with its own activations. A forward
// may keep only the stage inputs (checkpointing); recompute() or backward()
// rebuilds the rest by running forward again, bit for bit.
//
// Ownership: inputs are moved in, outputs moved out (no copies between
// stages); input gradients are moved out of backward. Not thread-safe: one
// owner (a trainer or a stage actor) calls it. Kernels use the calling
// thread's OpenMP thread count.
//
// Parameters may change (an optimizer step, a checkpoint load) only while
// no micro-batch is in flight: a forward that finds none in flight tells
// every layer (layer::parameters_changed) to refresh what it derives from
// them, such as the bf16 copy of a weight.

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "model/graph.hpp"
#include "model/tensor_pool.hpp"

namespace merak::model {

// The tensor-parallel group of an executor's shard: sums tensors in place
// over the shards of one stage (the stage actor implements it over comm/).
// Every shard starts the same sums in the same order; results are bitwise
// equal on every shard.
class tp_group {
 public:
  virtual ~tp_group() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;  // this shard's, in [0, size())
  // Starts summing `t` in place; `t` stays untouched by the caller until
  // wait(ticket) returns. Throws merak::error on failure.
  virtual int start_allreduce(tensor& t) = 0;
  // Sequence parallelism: `t` is a whole value viewed as size() equal
  // slices of its elements, slice k shard k's. Starts summing `t` so that
  // this shard's slice holds the sum (the rest of `t` undefined after).
  virtual int start_reduce_scatter(tensor& t) = 0;
  // Starts filling every other shard's slice of `t` with that shard's (this
  // shard's slice is in place).
  virtual int start_allgather(tensor& t) = 0;
  virtual void wait(int ticket) = 0;
};

class executor {
 public:
  // Materialises nodes [first, last) of `g` (last < 0: to the end), taking
  // parameters from `store`. The graph must outlive the executor.
  executor(const graph& g, parameter_store& store, int first = 0, int last = -1);

  const std::vector<int>& input_values() const { return inputs_; }
  const std::vector<int>& output_values() const { return outputs_; }
  bool computes_loss() const { return computes_loss_; }

  struct forward_result {
    std::vector<tensor> outputs;  // one per output_values()
    double loss = 0;              // mean per-token loss, if computes_loss()
  };
  // Forward of micro-batch `mb` (any id not in flight). `inputs` holds one
  // tensor per input_values(). With keep_stash false only the inputs are
  // kept (the whole range is checkpointed); otherwise the checkpointed prefix
  // (set_checkpoint) is dropped. Throws merak::error on bad inputs.
  forward_result forward(int mb, std::vector<tensor> inputs, bool keep_stash = true);

  // Checkpoints the first `nodes` nodes of the range: a forward keeps only
  // the values they pass on to later nodes, and recompute() (or backward)
  // runs them again. 0 (the default) keeps everything.
  void set_checkpoint(int nodes);
  int checkpoint() const { return checkpoint_; }
  // Where the range's segments start (indices into the range, ascending,
  // the first 0; for GPT one transformer block each). With segments, a
  // forward that drops activations keeps each dropped segment's inputs too,
  // and a backward that finds them dropped recomputes one segment at a
  // time, just before that segment's backward: only one segment's
  // activations are rebuilt at once (recompute() still rebuilds them all).
  // Empty (the default): backward recomputes the whole dropped prefix first.
  void set_segments(std::vector<int> starts);
  // Selective recomputation (layer::set_recompute_core): the layers that
  // can keep nothing from forward and rebuild their stash in backward (the
  // attention core) do so when `on`. Returns how many layers do.
  int set_selective_recompute(bool on);

  // Tensor parallelism: the graph is one shard's rewrite
  // (partition/tp_rewrite.hpp) and `group` sums its tp_comm nodes. `overlap`
  // is the sub-pipelining level (spec, "Sub-pipelined tensor parallelism"):
  // 0: each all-reduce blocks; 1: micro-batches run as two sub-micro-batches
  // (halves of the batch) so one's all-reduce overlaps the other's compute,
  // joining at the end of every transformer block (two all-reduces); 2: as
  // 1, without the join, so a block's last all-reduce overlaps the next
  // block. Results equal level 0 up to summation order of parameter
  // gradients. The group must outlive the executor.
  void set_tp(tp_group* group, int overlap);

  // Rebuilds the dropped activations of `mb` (a no-op if none are dropped).
  void recompute(int mb);
  bool has_stash(int mb) const;

  // Backward of `mb`: `output_grads` holds one gradient per output_values();
  // if computes_loss(), the loss contributes loss_scale x d(mean loss).
  // Accumulates parameter gradients; returns one gradient per input_values()
  // (undefined for integer inputs). Frees the micro-batch.
  // `node_done` (optional) is called with each node index once that node's
  // backward ran (for every sub-micro-batch): its parameters' gradients then
  // hold this micro-batch's share, so a last micro-batch can hand them to
  // the data-parallel reduction while the rest of backward runs.
  //
  // split_weights (the zb-h1 schedule): layers that can (layer::
  // splits_weight_grad) leave their weight gradients for weight_backward();
  // the micro-batch stays in flight, holding what those need (their inputs
  // and output gradients), until then, and node_done is called for those
  // nodes there.
  std::vector<tensor> backward(int mb, std::vector<tensor> output_grads, float loss_scale = 1.0f,
                               const std::function<void(int)>& node_done = {},
                               bool split_weights = false);
  // The weight gradients a split backward of `mb` left; frees the
  // micro-batch. Accumulates into the same parameter gradients, so a split
  // run sums exactly what backward() would.
  void weight_backward(int mb, const std::function<void(int)>& node_done = {});

  // Mean loss of a forward without gradients (needs computes_loss()).
  double evaluate(std::vector<tensor> inputs);
  // A forward without gradients of this range (validation on a pipeline
  // stage): its outputs, and the loss if computes_loss(); keeps nothing.
  forward_result infer(std::vector<tensor> inputs);

  // Per layer kind, seconds spent in forward and backward since profiling
  // was switched on (two clock reads per node).
  struct kind_time {
    double forward_s = 0, backward_s = 0;
  };
  void set_profiling(bool on) { profiling_ = on; }

  // Called before each node's forward and backward, on the calling thread
  // (the stage actor resizes its OpenMP team there when cores are lent to
  // it or wanted back mid-op). Empty: nothing is called.
  void set_node_hook(std::function<void()> hook) { node_hook_ = std::move(hook); }
  // Called with node n before each run of it (forward in training,
  // recomputation and evaluation; backward; a split weight gradient),
  // before it reads its parameters. `next` is the node that will most
  // likely run after it (n + 1 in forward, n - 1 in backward; -1 past the
  // range's end): what a caller that fetches parameters may fetch ahead.
  void set_parameter_hook(std::function<void(int n, int next)> hook) {
    parameter_hook_ = std::move(hook);
  }
  // Called under sub-pipelined tensor parallelism with each span of nodes
  // [lo, hi) that every sub-batch runs in turn before the next span (an
  // empty range once the forward or backward is over): parameters fetched
  // for the span's nodes are wanted again by the next sub-batch.
  void set_parameter_span_hook(std::function<void(int lo, int hi)> hook) {
    parameter_span_hook_ = std::move(hook);
  }
  // Transient parameters (sharded over data-parallel replicas, gathered
  // only for the nodes that read them): after each node ran, its layer lets
  // go of what it derived from its parameters (layer::drop_derived).
  void set_transient_parameters(bool on) { transient_parameters_ = on; }
  const std::map<std::string, kind_time>& profile() const { return profile_; }

  const graph& model_graph() const { return graph_; }
  // The order in which the last micro-batch's backward reports its nodes
  // finished (node_done; indices into this range, 0 = first): reverse order,
  // and with split_weights the nodes that split their weight gradient after
  // the others, again in reverse, as weight_backward finishes them.
  std::vector<int> backward_finish_order(bool split_weights) const;
  // Per node of this range (0 = first): whether its parameters' gradients
  // are final only after the tensor-parallel sums that end a backward (the
  // sequence-parallel region's nodes, which that order reports after the
  // others).
  std::vector<char> late_gradient_nodes() const;
  int in_flight() const { return int(batches_.size()); }
  // Bytes held by the activations of micro-batches in flight, with the
  // output gradients kept for deferred weight gradients (the pool's cache
  // of free buffers not counted: pool_bytes()).
  int64_t activation_bytes() const;
  // The most activation_bytes() held since the last reset: after each
  // forward and each recomputation (a segment's, inside backward, too).
  int64_t activation_peak() const { return activation_peak_; }
  void reset_activation_peak() { activation_peak_ = activation_bytes(); }
  int64_t pool_bytes() const { return pool_.cached_bytes(); }

 private:
  // One sub-micro-batch (the whole micro-batch unless sub-pipelined).
  struct sub_batch {
    std::vector<tensor> values;          // by graph value id
    std::vector<stash> stashes;          // by node index - first_
    std::map<int, tensor> weight_douts;  // by node index: output gradients for weight_backward
  };
  struct micro_batch {
    std::vector<sub_batch> subs;
    int dropped_until = 0;          // nodes [first_, dropped_until) need recomputing
    bool awaiting_weights = false;  // a split backward ran; weight_backward frees it
    bool stashed() const { return dropped_until == 0; }
  };
  micro_batch& state(int mb);
  int sub_count(int64_t batch) const;
  // `whole`: the gathered input of an sp_gather / sp_exit node.
  void run_node_forward(sub_batch& s, int n, const tensor* whole = nullptr);
  // A whole buffer for sequence parallelism's all-gather, this shard's
  // slice `part` copied in place.
  tensor gather_buffer(const tensor& part);
  // Sequence parallelism: the nodes whose parameters' gradients are partial
  // per shard, and their parameters.
  std::vector<int> sp_nodes_;
  // Sequence parallelism: the whole value an sp_gather makes is freed once
  // its one reader (a column-parallel linear) ran forward, and gathered
  // again from the slice just before that reader's backward. By reader:
  // the sp_gather node.
  std::map<int, int> regather_;
  // Sequence parallelism: the sp_reduce nodes whose input (a row-parallel
  // linear's whole partial sums, read by nothing else) is freed once it is
  // reduce-scattered and sliced: nobody's backward reads it.
  std::set<int> reduce_frees_input_;
  std::vector<parameter_ptr> sp_params_;
  // Runs nodes [from, to) forward over every sub-batch, interleaved at the
  // TP all-reduces.
  void run_forward(micro_batch& s, int from, int to);
  // keep (by value id, split backward only): values the deferred weight
  // gradients read, not released.
  // Sequence parallelism's partial parameter gradients of nodes [lo, hi):
  // begin swaps each gradient for a zeroed buffer that this backward
  // accumulates into; end sums the buffers over the shards, adds them to
  // the gradients swapped back and reports the nodes finished.
  struct sp_partials {
    std::vector<char> is_sp;  // by node index - first_
    std::vector<parameter_ptr> params;
    std::vector<tensor> partial;  // parallel to params
    std::vector<int> finished;    // the nodes whose backward is done, in that order
  };
  sp_partials begin_sp_partials(int lo, int hi);
  void end_sp_partials(sp_partials& sp, const std::function<void(int)>& node_done);
  // Reader n's whole input freed after forward (regather_), gathered again;
  // the value gathered now, or null (none to gather, or still whole).
  tensor* regather_input(sub_batch& sub, int n);
  // Node n's backward on one sub-batch, g its gradients by value id: the
  // input gradients it adds to acquired, the layer run, what no other
  // backward reads released. Returns whether the node is finished (false:
  // its weight gradient is deferred, `keep` given and the layer splits).
  bool run_node_backward(sub_batch& sub, std::vector<tensor>& g, int n,
                         const std::vector<char>* keep);
  std::vector<const tensor*> bwd_in_;  // run_node_backward's scratch
  std::vector<tensor*> bwd_din_;
  // Sub-pipelined TP: hands the parameter span hook the nodes every
  // sub-batch runs this round — a node `pending` from the last round (-1:
  // none), then from `cursor` on to the next node that starts a TP
  // collective, up to `limit` (forward: exclusive end; backward: lowest).
  void hold_round(int cursor, int pending, int limit, bool forward);
  // Nodes [lo, hi) backward, from hi - 1 down; `sp` the partials of the
  // whole backward (of which [lo, hi) may be one segment), whose nodes are
  // reported finished once it ends (end_sp_partials), after the others.
  void run_backward(micro_batch& s, std::vector<std::vector<tensor>>& grads,
                    const std::vector<char>* keep, const std::function<void(int)>& node_done,
                    sp_partials& sp, int lo, int hi);
  // Drops what nodes [first_, until) produced, but what later nodes read.
  void drop_activations(micro_batch& s, int until);
  // Drops what nodes [lo, hi) produced, but what later nodes read and the
  // range's outputs and loss.
  void drop_range(micro_batch& s, int lo, int hi);
  void release(micro_batch& s);

  const graph& graph_;
  int first_, last_;
  std::vector<std::unique_ptr<layer>> layers_;  // node first_ + i
  std::vector<std::vector<parameter_ptr>> node_params_;  // node first_ + i
  // A gradient its owner released (left undefined, as the gradient shards
  // of the distributed optimizer do) is zeros again before node n's
  // backward accumulates into it.
  void materialize_gradients(int n);
  std::vector<int> inputs_, outputs_;
  std::vector<bool> used_inside_;  // by value id: read by a node of this range
  bool computes_loss_ = false;
  int checkpoint_ = 0;
  std::vector<int> segment_starts_;  // absolute node indices; empty: none given
  int64_t activation_peak_ = 0;
  void note_activations() { activation_peak_ = std::max(activation_peak_, activation_bytes()); }
  std::map<int, micro_batch> batches_;
  device where_;  // the parameters' device: activations live there too
  tensor_pool pool_;
  tp_group* tp_ = nullptr;
  int tp_overlap_ = 0;
  bool profiling_ = false;
  std::function<void()> node_hook_;
  std::function<void(int, int)> parameter_hook_;
  std::function<void(int, int)> parameter_span_hook_;
  void parameter_span(int lo, int hi) {
    if (parameter_span_hook_) parameter_span_hook_(std::max(lo, first_), std::min(hi, last_));
  }
  bool transient_parameters_ = false;
  // The hook, then node n's layer: what the node reads must be present.
  void before_node(int n, int next) {
    if (parameter_hook_) parameter_hook_(n, next < first_ || next >= last_ ? -1 : next);
  }
  void after_node(int n);
  std::map<std::string, kind_time> profile_;
};

}  // namespace merak::model
