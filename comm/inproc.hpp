#pragma once
// In-process transport: the endpoints of one group are threads of one
// process that share mailboxes (see transport.hpp for the contract).
//
// A send to a peer that has already posted the matching receive copies the
// payload once, straight from the send buffer into the receive buffer; a send
// that finds no receive posted copies the payload into the peer's mailbox
// (one more copy when the receive comes). Either way a send is complete when
// it returns: its buffer may be reused at once.
//
// Receives wait at most the endpoint's timeout; a timed-out receive is
// withdrawn (its buffer is no longer written) and throws merak::error naming
// this rank, the peer and the tag. Destroying an endpoint closes it: its
// peers' receives from it that no buffered message can satisfy fail at once,
// naming it, as a dead process would with a network transport.

#include <chrono>
#include <memory>
#include <vector>

#include "comm/transport.hpp"

namespace merak::comm {

// `size` endpoints, endpoint i has rank i. Each endpoint is owned by one
// thread at a time; different endpoints may be used concurrently. Throws
// merak::error if size < 1.
std::vector<std::unique_ptr<transport>> make_inproc_group(
    int size, std::chrono::milliseconds timeout = std::chrono::milliseconds(60000));

}  // namespace merak::comm
