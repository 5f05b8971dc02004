// The consensus ADMM worker actor: one behaviour, no phases of its own; the
// consensus side drives it (actors/svm_consensus.cpp).
#include "actors/svm_worker_actor.hpp"

#include "actors/svm_messages.hpp"

namespace merak::actors {
namespace {

caf::behavior svm_worker(caf::event_based_actor*, std::shared_ptr<svm::consensus_worker> w) {
  return {
      [w](svm_local_atom, const std::vector<double>& zeta) {
        return to_vector(w->local_step(to_eigen(zeta)));
      },
      [w](svm_dual_atom, const std::vector<double>& zeta) {
        return pack(w->dual_step(to_eigen(zeta)));
      },
      [w](svm_rho_atom, double factor) {
        w->scale_rho(factor);
        return caf::atom("ok");
      },
  };
}

}  // namespace

caf::actor spawn_svm_worker(caf::actor_system& sys, std::unique_ptr<svm::consensus_worker> w) {
  return sys.spawn(svm_worker, std::shared_ptr<svm::consensus_worker>(std::move(w)));
}

}  // namespace merak::actors
