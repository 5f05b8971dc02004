#pragma once
// Messages between the consensus ADMM actors (CAF 0.17), in one process and
// across processes (docs/svm.md, "Multi-process consensus"). Included only by
// actors/svm_*.cpp.
//
// Vectors travel as svm_vector: in one process it is moved, not copied;
// across processes its inspect() writes the doubles as one block of bytes
// (little-endian hosts assumed, as everywhere in merak), not element by
// element. Every worker reply names the worker's rank, so the consensus side
// can gather them with plain sends and still watch each worker's `down`.
//
//   consensus -> worker k                        worker k -> consensus
//   (svm_local, zeta)   first iteration          (svm_local, k, theta_k + U1_k)
//   (svm_dual, zeta)                             (svm_dual, k, residuals: 6 numbers,
//                                                  next theta_k + U1_k against zeta)
//   (svm_rho, factor)                            (svm_rho, k, theta_k + U1_k redone with
//                                                  the rhos scaled, duals rescaled)
//   worker processes only, before and after the iterations:
//   (svm_stats)                                  (svm_stats, k, rows, cols, [sum; sq_sum])
//   (svm_setup, scale, n, p, rho1, rho2,         (svm_setup, k): shard scaled, factored
//              method, dense_limit)
//   (svm_eval, w)                                (svm_eval, k, X_k w, y_k)
//   cross-validation (--procs K --folds F), before stats of each fit:
//   (svm_select, folds, fold): train on fold     (svm_select, k, training rows, held-out rows)
//              `fold`'s training rows (folds 0:
//              all rows), hold out its others
//   (svm_test, w in the data's units)            (svm_test, k, X_test_k w, y_test_k)
//   (svm_done)                                   - (the worker stops)
//   any phase, when the maths throw:             (svm_fail, k, what)
//
//   worker process -> rendezvous (the published actor of the consensus side):
//   (svm_hello, token, rank, world, worker)   -> verdict: "" accepted, else why not
//   rendezvous -> consensus side: (svm_joined, rank, worker), (svm_refused, why)

#include <caf/all.hpp>

#include <cstring>
#include <vector>

#include "svm/consensus.hpp"

namespace merak::actors {

using svm_local_atom = caf::atom_constant<caf::atom("svmlocal")>;
using svm_dual_atom = caf::atom_constant<caf::atom("svmdual")>;
using svm_rho_atom = caf::atom_constant<caf::atom("svmrho")>;
using svm_stats_atom = caf::atom_constant<caf::atom("svmstats")>;
using svm_setup_atom = caf::atom_constant<caf::atom("svmsetup")>;
using svm_eval_atom = caf::atom_constant<caf::atom("svmeval")>;
using svm_done_atom = caf::atom_constant<caf::atom("svmdone")>;
using svm_select_atom = caf::atom_constant<caf::atom("svmselect")>;
using svm_test_atom = caf::atom_constant<caf::atom("svmtest")>;
using svm_fail_atom = caf::atom_constant<caf::atom("svmfail")>;
using svm_hello_atom = caf::atom_constant<caf::atom("svmhello")>;
using svm_joined_atom = caf::atom_constant<caf::atom("svmjoined")>;
using svm_refused_atom = caf::atom_constant<caf::atom("svmrefused")>;

struct svm_vector {
  std::vector<double> v;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, svm_vector& x) {
  std::vector<char> bytes;
  if (Inspector::reads_state)
    bytes.assign(reinterpret_cast<const char*>(x.v.data()),
                 reinterpret_cast<const char*>(x.v.data() + x.v.size()));
  auto load = caf::meta::load_callback([&]() -> caf::error {
    if (bytes.size() % sizeof(double) != 0) return caf::sec::invalid_argument;
    x.v.resize(bytes.size() / sizeof(double));
    if (!bytes.empty()) std::memcpy(x.v.data(), bytes.data(), bytes.size());
    return caf::none;
  });
  return f(caf::meta::type_name("merak.svm_vector"), bytes, load);
}

// Every type above that is not built into CAF, for a system that talks to
// other processes.
inline void add_svm_message_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<svm_vector>("merak.svm_vector");
}

inline svm_vector to_vector(const Eigen::VectorXd& v) {
  return {std::vector<double>(v.data(), v.data() + v.size())};
}
inline Eigen::VectorXd to_eigen(const svm_vector& v) {
  return Eigen::Map<const Eigen::VectorXd>(v.v.data(), Eigen::Index(v.v.size()));
}
inline svm_vector pack(const svm::worker_residuals& r) {
  return {
      {r.primal_sq, r.r_change_sq, r.local_norm_sq, r.aux_norm_sq, r.dual_norm_sq, double(r.rows)}};
}
// False when `v` is not 6 numbers.
inline bool unpack(const svm_vector& v, svm::worker_residuals& r) {
  if (v.v.size() != 6) return false;
  r.primal_sq = v.v[0], r.r_change_sq = v.v[1], r.local_norm_sq = v.v[2], r.aux_norm_sq = v.v[3];
  r.dual_norm_sq = v.v[4], r.rows = int64_t(v.v[5]);
  return true;
}

}  // namespace merak::actors
