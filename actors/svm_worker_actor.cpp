// The consensus ADMM worker actor: owns one row shard's state and answers the
// consensus side's phases (actors/svm_messages.hpp). Stateless protocol: one
// behaviour, no phases of its own.
#include <memory>

#include "actors/svm_messages.hpp"
#include "actors/svm_worker_actor.hpp"

namespace merak::actors {

namespace {
struct svm_worker_state {
  std::unique_ptr<svm::consensus_worker> worker;
};
}  // namespace

caf::behavior svm_worker_actor(caf::stateful_actor<svm_worker_state>* self,
                               std::shared_ptr<svm::consensus_worker> w);

caf::actor spawn_svm_worker(caf::actor_system& sys, std::unique_ptr<svm::consensus_worker> w) {
  auto fn = [](caf::stateful_actor<svm_worker_state>* self,
               std::shared_ptr<svm::consensus_worker> w) -> caf::behavior {
    return {
        [=](svm_local_atom, const std::vector<double>& zeta) {
          return to_vector(w->local_step(to_eigen(zeta)));
        },
        [=](svm_dual_atom, const std::vector<double>& zeta) {
          return pack(w->dual_step(to_eigen(zeta)));
        },
        [=](svm_rho_atom, double factor) {
          w->scale_rho(factor);
          return caf::atom("ok");
        },
    };
  };
  return sys.spawn(fn, std::shared_ptr<svm::consensus_worker>(std::move(w)));
}

}  // namespace merak::actors
