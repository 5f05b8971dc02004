#pragma once
// Spawns a consensus ADMM worker actor around one row shard. It answers the
// phases in actors/svm_messages.hpp with replies that carry its rank; an
// exception in the maths becomes a reply that says what failed
// (svm_from::error), so the consensus side names the worker and the cause.

#include "actors/svm_messages.hpp"

#include <chrono>
#include <memory>

#include "svm/consensus.hpp"

namespace merak::actors {

// In one process: the shard is already scaled and factored.
svm_worker_api spawn_svm_worker(caf::actor_system& sys, int rank,
                                std::unique_ptr<svm::consensus_worker> w);

// In a worker process: `data` is the whole data file when `whole_file`
// (the actor keeps it and trains on rank `rank`'s block of `world`, or on its
// block of a fold's training rows after svm_select), else this rank's rows
// only (--presharded; no cross-validation). The consensus side asks for its
// column statistics, then sends the scaling and the rhos (svm_setup), after
// which it works as above; an svm_select starts the next fit. The actor
// stops on svm_done (exit reason normal), when `consensus` (the published
// rendezvous actor of the consensus side) goes down, or after `idle` without
// a message (0: never); the exit reason then says which.
svm_worker_api spawn_svm_shard_worker(caf::actor_system& sys, int rank, int world,
                                      svm::dataset data, bool whole_file, caf::actor consensus,
                                      std::chrono::milliseconds idle);

}  // namespace merak::actors
