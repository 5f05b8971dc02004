#pragma once
// The layer interface: a forward/backward pair over host tensors.
//
// Activations are B x T x features. A layer is stateless across
// micro-batches: whatever backward needs beyond its inputs and output goes
// into the `stash` the caller passes, so a stage can hold several
// micro-batches in flight, drop a stash and rebuild it by running forward
// again (recomputation). Parameters are owned through parameter_ptr.
// Called from one thread at a time; kernels parallelise internally.

#include <span>
#include <vector>

#include "model/parameter.hpp"
#include "model/tensor.hpp"
#include "model/tensor_pool.hpp"

namespace merak::model {

struct stash {
  std::vector<tensor> tensors;
  tensor_pool* pool = nullptr;  // where add() takes storage from, if set
  device where;                 // else: the device add() allocates on

  // Appends a stash tensor of this shape and returns it.
  tensor& add(const shape_t& shape, dtype type = dtype::f32) {
    tensors.push_back(pool ? pool->acquire(shape, type, false) : tensor(shape, type, where));
    return tensors.back();
  }
  // Drops the stash, returning storage to the pool.
  void clear() {
    for (auto& t : tensors)
      if (pool) pool->release(std::move(t));
    tensors.clear();
  }
  int64_t bytes() const {
    int64_t n = 0;
    for (auto& t : tensors) n += int64_t(t.bytes());
    return n;
  }
};

class layer {
 public:
  virtual ~layer() = default;

  // Shape of the output for the given input shapes; throws merak::error on
  // inputs this layer cannot take.
  virtual shape_t output_shape(std::span<const shape_t> in) const = 0;

  // Computes `out` (already allocated with output_shape) from `in`; may fill
  // `st` with what backward needs.
  virtual void forward(std::span<const tensor* const> in, tensor& out, stash& st) = 0;

  // Accumulates the input gradients into din[i] (null where no gradient is
  // needed) and the parameter gradients into parameter::grad.
  // The layer's own output is not passed: it may have left the stage.
  virtual void backward(std::span<const tensor* const> in, const tensor& dout,
                        std::span<tensor* const> din, stash& st) = 0;

  // Split backward (the zb-h1 schedule): a layer that can leave its weight
  // gradient for later says so; backward_input() then accumulates the input
  // gradients (and any cheap parameter gradients), backward_weight() the
  // rest, from the same inputs and output gradient. Their sum is backward().
  virtual bool splits_weight_grad() const { return false; }
  virtual void backward_input(std::span<const tensor* const> in, const tensor& dout,
                              std::span<tensor* const> din, stash& st) {
    backward(in, dout, din, st);
  }
  virtual void backward_weight(std::span<const tensor* const> in, const tensor& dout) {}

  // Selective recomputation: a layer whose stash is large and cheap to
  // rebuild from its inputs (the attention core's T x T probabilities)
  // keeps nothing from forward when `on` and recomputes it at the start of
  // backward, giving the same gradients bit for bit. Returns whether this
  // layer does so (false: it keeps its stash, whatever `on`).
  virtual bool set_recompute_core(bool on) { return false; }

  // The parameters' values may have changed since the last call: whatever
  // the layer derives from them (a bf16 copy of a weight) must be rebuilt
  // before its next use. Called by the executor between steps.
  virtual void parameters_changed() {}
  // The parameters' values are about to be released (sharded parameters):
  // whatever the layer derives from them is freed, and rebuilt at its next
  // use, bit for bit.
  virtual void drop_derived() {}
};

}  // namespace merak::model
