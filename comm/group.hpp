#pragma once
// A group over some ranks of a larger transport: the group's rank i is the
// underlying transport's rank members[i]. Collectives run on it as on any
// transport (see transport.hpp for the contract); the underlying transport
// must carry no other traffic between these members on the same tags (give
// each group a transport of its own, or tags of its own).
//
// The view owns a shared handle on the underlying transport and forwards
// each send and receive with the peer's rank translated; bytes_sent counts
// what passed through the view. Used by one thread at a time, like the
// transport under it.

#include <memory>
#include <vector>

#include "comm/transport.hpp"

namespace merak::comm {

// `members`: distinct ranks of `under`, in group rank order; under->rank()
// must be one of them. Throws merak::error otherwise.
std::unique_ptr<transport> make_group_view(std::shared_ptr<transport> under,
                                           std::vector<int> members);

}  // namespace merak::comm
