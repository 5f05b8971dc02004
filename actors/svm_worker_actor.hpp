#pragma once
// Spawns a consensus ADMM worker actor around one shard's svm state. The
// actor answers the phases in actors/svm_messages.hpp; an exception in the
// maths ends the actor (its requester sees the error).

#include <caf/fwd.hpp>

#include <memory>

#include "svm/consensus.hpp"

namespace merak::actors {

caf::actor spawn_svm_worker(caf::actor_system& sys, std::unique_ptr<svm::consensus_worker> w);

}  // namespace merak::actors
