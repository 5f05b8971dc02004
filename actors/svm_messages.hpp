#pragma once
// Messages between the consensus ADMM actors (CAF 0.17). Included only by
// actors/svm_*.cpp. Vectors travel as std::vector<double> of p + 1 numbers
// (in one process they are moved, not copied).
//
//   consensus -> worker k              worker k -> consensus
//   (svm_local, zeta)                  theta_k + U1_k
//   (svm_dual, zeta)                   residuals (worker_residuals, 6 numbers)
//   (svm_rho, factor)                  ok (both rhos scaled, duals rescaled)

#include <caf/all.hpp>

#include <vector>

#include "svm/consensus.hpp"

namespace merak::actors {

using svm_local_atom = caf::atom_constant<caf::atom("svmlocal")>;
using svm_dual_atom = caf::atom_constant<caf::atom("svmdual")>;
using svm_rho_atom = caf::atom_constant<caf::atom("svmrho")>;

inline std::vector<double> to_vector(const Eigen::VectorXd& v) {
  return {v.data(), v.data() + v.size()};
}
inline Eigen::VectorXd to_eigen(const std::vector<double>& v) {
  return Eigen::Map<const Eigen::VectorXd>(v.data(), Eigen::Index(v.size()));
}
inline std::vector<double> pack(const svm::worker_residuals& r) {
  return {r.primal_sq,   r.r_change_sq,  r.local_norm_sq,
          r.aux_norm_sq, r.dual_norm_sq, double(r.rows)};
}
inline svm::worker_residuals unpack(const std::vector<double>& v) {
  svm::worker_residuals r;
  if (v.size() != 6) return r;
  r.primal_sq = v[0], r.r_change_sq = v[1], r.local_norm_sq = v[2], r.aux_norm_sq = v[3];
  r.dual_norm_sq = v[4], r.rows = int64_t(v[5]);
  return r;
}

}  // namespace merak::actors
