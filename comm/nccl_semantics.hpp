#pragma once
// NCCL's point-to-point semantics over the endpoints of an in-process group,
// so that code written against transport.hpp is checked, without a GPU,
// for what NCCL would do differently from the host transports:
//
// - No tags: NCCL matches the messages between a pair in the order they
//   were posted. The wrapped endpoints carry every message of a pair on one
//   tag, in order, and a receive whose tag differs from the tag of the send
//   it took fails on wait, naming both tags, the peer and both positions —
//   where NCCL would silently have delivered the wrong message.
// - Rendezvous: an NCCL send completes only once the peer has posted the
//   matching receive (the in-process transport completes sends at once). A
//   send here is done only when both hold, so a rank that waits on a send
//   before posting the receive its peer waits on deadlocks here as it would
//   on NCCL, and the wait fails at the endpoint's timeout naming the send.
//
// Collectives (collectives.hpp) run unchanged over the wrapped endpoints.
// On: set_nccl_semantics(true) or MERAK_NCCL_SEMANTICS=1 in the environment;
// the actor runtime then wraps every in-process group it makes (TP groups,
// data-parallel groups), and a run must give the losses it gives without.

#include <memory>
#include <vector>

#include "comm/transport.hpp"

namespace merak::comm {

// Whether the runtime wraps its in-process groups (initially:
// MERAK_NCCL_SEMANTICS set and not "0").
void set_nccl_semantics(bool on);
bool nccl_semantics();

// The endpoints of one group (endpoint i of rank i, e.g. make_inproc_group's),
// each wrapped; they share the pairs' bookkeeping. Each wrapped endpoint
// takes its timeout from the one it wraps. Throws merak::error on an empty
// group or ranks out of order.
std::vector<std::unique_ptr<transport>> with_nccl_semantics(
    std::vector<std::unique_ptr<transport>> group);

}  // namespace merak::comm
