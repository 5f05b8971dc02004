#pragma once
// Collectives on device memory without a trip through host memory (NCCL on
// CUDA), behind one interface that a group's owner calls for tensors that
// live on a device (docs/comm-transport.md, "Device collectives"). comm/
// links no device library: the code that enables a device kind registers
// the maker of its collectives (the CUDA module registers NCCL's), and a
// group without one moves device tensors through host copies as before.
//
// Contract of an instance: one member of one group (the group's host
// transport gives its rank and size), for tensors on one device; used by
// one thread at a time; every member issues the same calls in the same
// order with the same sizes (the host rings' rule, comm/collectives.hpp).
// Results equal the host rings' up to the order of the additions.

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "comm/transport.hpp"
#include "model/tensor.hpp"

namespace merak::comm {

class device_collectives {
 public:
  virtual ~device_collectives() = default;
  // x (f32 or bf16) <- the sum over the group, in place.
  virtual void allreduce_sum(model::tensor& x) = 0;
  // x[shard_range(n, P, rank)] <- the sum over the group of that range;
  // the rest of x is left unspecified (comm::reduce_scatter_sum).
  virtual void reduce_scatter_sum(model::tensor& x) = 0;
  // On entry x[shard_range(n, P, rank)] is this member's; on return every
  // shard holds its owner's elements (comm::allgather_shards), any dtype.
  virtual void allgather_shards(model::tensor& x) = 0;
  // "nccl": for messages and traces.
  virtual std::string name() const = 0;
};

// allgather_shards_bf16 (comm/collectives.hpp) for a float tensor on a
// device, through `dc` (a member of `group`): on entry x[shard_range(n, P,
// rank)] is this member's; on return every other shard holds its owner's
// values rounded to bf16 (to nearest, ties to even) and widened back, but
// in the `exact` ranges ([begin, end) pairs, sorted and disjoint) its
// owner's floats; this member's shard is left untouched. Two collectives:
// the bucket as bf16, then the exact ranges' floats, each shard's padded to
// the most any shard holds. Equal to the host's allgather_shards_bf16 bit
// for bit. Throws merak::error naming a bad range.
void allgather_shards_bf16(device_collectives& dc, const transport& group, model::tensor& x,
                           std::span<const std::pair<size_t, size_t>> exact);

struct device_collectives_options {
  // Run on a stream of the collectives' own, not the device's (the stream
  // of the kernels around them): for a caller on another thread than the
  // device's kernels (a data-parallel reducer), whose collectives must not
  // sit in that stream between another group's. The caller guarantees that
  // a tensor is complete when a call starts (host-synchronous copies); a
  // call returns once its result is.
  bool side_stream = false;
};

// Makes one member's collectives for tensors on device `d`. Collective
// over `group`: every member calls it at the same point of its sequence of
// calls, and it may exchange its set-up (a communicator's id) over `group`
// with `tag`. Throws merak::error naming the member and the reason.
using device_collectives_maker = std::function<std::unique_ptr<device_collectives>(
    transport& group, model::device d, tag_t tag, const device_collectives_options& options)>;

// Registers (or, with an empty maker, removes) the maker for device kind
// `k`; thread-safe.
void register_device_collectives(model::device::kind k, device_collectives_maker make);

// Whether a maker is registered for `k` and device collectives are not
// turned off (MERAK_DEVICE_COLLECTIVES=0: every device tensor goes through
// host copies).
bool has_device_collectives(model::device::kind k);

// The registered maker's collectives for `d` over `group` (see
// device_collectives_maker), or null when has_device_collectives is false
// (CPU tensors included).
std::unique_ptr<device_collectives> make_device_collectives(
    transport& group, model::device d, tag_t tag, const device_collectives_options& options = {});

}  // namespace merak::comm
