#pragma once
// Tensors on a device between two processes without a trip through host
// memory (NCCL's ncclSend / ncclRecv on CUDA), for the tensor channel
// (comm/tensor_channel.hpp): a pipeline's activations and gradients
// between stages in different processes. As with the device collectives
// (comm/device_collectives.hpp), comm/ links no device library: the code
// that enables a device kind registers the maker of its links, and a
// channel without one moves device tensors through host copies.
//
// Contract of a link: this process's end of a link with one peer process,
// for tensors on one device; its calls serialised by the caller (the
// channel's lock). Transfers match NCCL's rule: the n-th send on one side
// fills the n-th receive on the other, per direction, and the two
// directions never wait for each other. The channel posts sends in its
// messages' order and a receive as each header arrives (headers of a pair
// arrive in order), which keeps them matched.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/transport.hpp"
#include "model/tensor.hpp"

namespace merak::comm {

// Tags from here up on a channel's transport belong to its device links
// (the channel's own payload tags stay below).
constexpr tag_t kdevice_link_tags = tag_t{1} << 43;

class device_transfer {
 public:
  virtual ~device_transfer() = default;
  // Whether the transfer finished; throws merak::error naming the link and
  // the reason when it failed or did not finish within the link's bound.
  virtual bool test() = 0;
};

class device_link {
 public:
  virtual ~device_link() = default;
  // Starts sending `x` (on the link's device, complete: the caller's
  // copies and kernels are host-synchronous or on the device's stream) to
  // the peer; `x` stays alive and unchanged until the transfer's test()
  // returns true.
  virtual std::unique_ptr<device_transfer> send(const model::tensor& x) = 0;
  // Allocates `into` on the link's device with `shape` and `type` and
  // starts filling it from the peer's next send.
  virtual std::unique_ptr<device_transfer> recv(const model::shape_t& shape, model::dtype type,
                                                model::tensor& into) = 0;
  virtual model::device where() const = 0;
  // "nccl": for messages.
  virtual std::string name() const = 0;
};

// Makes this process's end of the link with `peer` over the channel's
// transport `t` (before the channel owns it), for tensors on device `d`:
// collective between the two (both call it; it may exchange its set-up
// over `t` in tags from kdevice_link_tags). Throws merak::error naming
// the peer and the reason.
using device_link_maker =
    std::function<std::unique_ptr<device_link>(transport& t, int peer, model::device d)>;

// Registers (or, with an empty maker, removes) the maker for device kind
// `k`; thread-safe.
void register_device_links(model::device::kind k, device_link_maker make);

// A channel's links by peer rank.
using channel_links = std::map<int, std::shared_ptr<device_link>>;

// This process's links with each of `peers` for tensors on `d` (none when
// no maker is registered for its kind, or with MERAK_DEVICE_COLLECTIVES=0,
// which turns the links off with the collectives): made pair by pair in one order over the
// whole job (the pair with the lower ranks first), so that two processes
// never wait on each other's set-up in opposite orders. Every process of
// the job calls it with the peers it exchanges tensors with, symmetric (q
// in p's peers exactly when p in q's).
channel_links make_device_links(transport& t, const std::vector<int>& peers, model::device d);

}  // namespace merak::comm
