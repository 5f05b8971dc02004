#pragma once
// Nonconvex penalties by the local linear approximation (LLA; Zou & Li 2008,
// Fan, Xue & Zou 2014): every penalty here is concave and non-decreasing in
// |t|, so P(t) <= P(t_k) + P'(|t_k|)(|t| - |t_k|) and the weighted-L1 problem
//   min (1/n) sum_i hinge_i + sum_j P'(|w_k,j|) |w_j|
// majorises F at w_k. Each step solves that convex problem by the two-block
// ADMM, warm-started from the previous step's ADMM state; F never increases
// (up to the ADMM tolerance) and a fixed point is a stationary point of F.
// Step 0 is the LLA step from w = 0: the weighted L1 fit with every weight
// P'(0+) (for SCAD, MCP and capped-L1 the L1 fit at the same lambda; for LSP,
// whose slope at 0 is lambda / theta, the L1 fit at lambda / theta).
//
// Why not the direct nonconvex ADMM (admm_solve with the nonconvex prox)?
// Measured on golub, westbc and sonar (docs/svm.md): from a cold start it
// settles on stationary points with worse CV accuracy at the lambdas where
// the penalty should pay off, and needs a small rho1 (above the prox
// threshold) that makes it slow; LLA's steps are convex, run at L1's rho and
// reuse the factorisation.

#include "svm/admm.hpp"

namespace merak::svm {

struct lla_options {
  int max_steps = 20;     // reweighted L1 solves after the L1 one
  double rel_tol = 1e-4;  // stop when F falls by less than this share in a step
  // Step 0 with every weight P'(0+) / lambda (the LLA step from w = 0)
  // rather than the plain L1 fit at lambda; differs for LSP only (1/theta).
  bool start_from_zero = true;
};

// x: (n, p), y: (n). The result's objective is F with `pen`; iterations and
// time add up all ADMM runs; converged: the last ADMM run converged and the
// weights (or F) settled within max_steps. start: as admm_solve (a state of
// an earlier fit on the same data, e.g. the previous lambda of a path).
// Throws as admm_solve. For pen.kind == l1 this is admm_solve.
admm_result lla_solve(const design_matrix& x, const Eigen::VectorXd& y, const penalty& pen,
                      const admm_options& o, const lla_options& lo = {},
                      const admm_state* start = nullptr);

}  // namespace merak::svm
