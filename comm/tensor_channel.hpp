#pragma once
// Tensors between the processes of a job, beside the actors' control
// messages: the data plane of pipeline activations and their gradients
// (docs/launch.md, "How the actors talk across processes").
//
// One channel per process owns a transport over the job's processes (UCX:
// shared memory on one host, the network across hosts; rendezvous moves a
// large tensor straight from the sender's buffer) and a thread that drives
// it. The thread sleeps on the transport's event fd between events; given a
// spin budget it polls for that long after any traffic (ten times that
// while a tensor is in flight) before it sleeps, which saves a wake-up when
// it has a core to itself and takes one from the compute when it has not.
// A sender whose tensor finds that thread asleep posts the tensor itself
// (the transport is serialised by a lock the sender only tries), so the
// tensor leaves without waiting for the thread to be scheduled; it wakes
// the thread only when the send needs more progress than posting it made
// (a payload, unless it went through a ring: see below).
//
// Wire protocol, per ordered pair of processes:
//   header  (tag 0, 96 bytes): magic, label (destination, kind, micro-batch,
//           value), element type, rank and dims, sequence number s, flags,
//           ring position
//   payload (tag s, the tensor's bytes), sent right after its header,
//           unless the header says the tensor lies in the pair's ring
// A tensor on a device goes over the pair's device link when the channel
// has one for that device (device_links.hpp): the header says so and the
// payload moves link to link (NCCL), arriving on the receiver's device;
// without one it is copied to the host first and arrives there.
// Two processes of one host may share a ring per direction (host_ring.hpp):
// a sender with one copies a tensor into it when it has room and sends the
// header alone; the receiver copies the tensor out as the header arrives.
// A tensor the ring has no room for goes as a payload.
// The receiver keeps a header receive posted for every peer at all times
// (so a sender never waits on the receiver's schedule: a header is small
// and goes eagerly), and posts the payload's receive as soon as its header
// arrives; s counts the pair's messages from 1, so payloads match exactly.
// Headers of one pair arrive in order.
//
// Delivery and failure are callbacks on the channel's thread: they must be
// quick and thread-safe (e.g. hand the tensor to an actor as a message).

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/device_links.hpp"
#include "comm/host_ring.hpp"
#include "comm/transport.hpp"
#include "model/tensor.hpp"

namespace merak::comm {

// What a tensor is, for the receiving side: opaque to the channel.
struct tensor_label {
  int32_t dst = 0;    // the receiving actor
  int32_t kind = 0;   // e.g. activation or gradient
  int32_t mb = 0;     // micro-batch
  int32_t value = 0;  // graph value id
};

// Rings shared with peers on this host, by peer rank: `to[p]` carries this
// process's tensors to p, `from[p]` p's tensors here (the other end of p's
// `to[this rank]`). Peers without one get every tensor as a payload.
struct channel_rings {
  std::map<int, std::shared_ptr<host_ring>> to, from;
};

// Rings of `capacity` bytes with each of `peers` (ranks of `b` on this
// host), one per direction. A collective: every rank of `b` calls it, with
// or without peers, and with the same `job` (it names the shared memory).
// A ring that cannot be made or mapped is left out with a warning (those
// tensors go as payloads); a sender gets its ring only if the receiver
// mapped it. The names are gone when it returns.
class control_plane;
channel_rings make_host_rings(control_plane& b, const std::vector<int>& peers, size_t capacity,
                              uint64_t job);

class tensor_channel {
 public:
  using deliver_fn = std::function<void(int peer, const tensor_label&, model::tensor)>;
  using fail_fn = std::function<void(const std::string& what)>;

  // Takes `t` (used by the channel's thread alone from now on) and starts
  // receiving from every other rank of it; `spin`: see above (0: never);
  // `links`: device links by peer (make_device_links).
  tensor_channel(std::shared_ptr<transport> t, deliver_fn deliver, fail_fn failed,
                 std::chrono::microseconds spin = std::chrono::microseconds(0),
                 channel_rings rings = {}, channel_links links = {});
  // Stops the thread; operations in flight are withdrawn.
  ~tensor_channel();
  tensor_channel(const tensor_channel&) = delete;
  tensor_channel& operator=(const tensor_channel&) = delete;

  // Sends `x` to rank `peer` (not this one) under `label`; returns at once
  // (thread-safe). The channel keeps `x` until it is sent. Tensors of up to
  // 6 dimensions; one on a device without a link to `peer` for that device
  // is copied to the host here.
  void send(int peer, const tensor_label& label, std::shared_ptr<const model::tensor> x);

  int rank() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace merak::comm
