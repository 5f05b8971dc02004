#pragma once
// Consensus ADMM on CAF actors: one worker actor per row shard (holding an
// svm::consensus_worker) and the consensus side (an svm::consensus_reducer)
// in the calling thread's scoped actor, which fans each phase out to the
// workers and gathers their answers. The maths are svm/consensus.hpp; this
// only moves vectors. Messages: actors/svm_messages.hpp.
//
// Every request has a timeout; a worker that dies or does not answer ends the
// fit with a merak::error naming the worker, the phase and the iteration.
// Call from a thread that is not a CAF worker (it blocks on replies).

#include <caf/fwd.hpp>

#include <chrono>
#include <vector>

#include "svm/consensus.hpp"

namespace merak::actors {

struct svm_actor_options {
  svm::consensus_options admm;
  std::chrono::milliseconds timeout{30000};  // per request
  // Fault injection for tests: kill worker `kill_worker` (>= 0) at the start
  // of iteration `kill_at`, as a crash would.
  int kill_worker = -1;
  int kill_at = 1;
};

// Runs in `sys` (spawns K workers, stops them before returning).
svm::consensus_result consensus_fit_actors(caf::actor_system& sys, const svm::dataset& d,
                                           int workers, const svm::penalty& pen,
                                           const svm_actor_options& options);
// The same in an actor system of its own (sharing scheduler, one thread per core).
svm::consensus_result consensus_fit_actors(const svm::dataset& d, int workers,
                                           const svm::penalty& pen,
                                           const svm_actor_options& options);

}  // namespace merak::actors
