#pragma once
// Internal to svm/admm*.cpp: the two-block ADMM over every column of x
// (admm_solve without screening), and what a working set's run adds to its
// stopping rule for the columns left out (svm/admm.cpp's screening).

#include <functional>

#include <Eigen/Core>

#include "svm/admm.hpp"

namespace merak::svm::detail {

// What the stopping rule of a working set's ADMM adds for the columns left
// out, so that it stops where the whole problem's would: their count (in the
// absolute tolerance's sqrt(n + p)) and rho1^2 |u1|^2 over them.
// `check`, when set, is called every check_every iterations with the
// current u2 and rho2; it returns true when the working set must grow (the
// run then stops, not converged, with its state).
struct left_out {
  int64_t cols = 0;
  double dual_sq = 0;
  int iteration_offset = 0;  // earlier runs' iterations, for the monitor
  int check_every = 0;
  std::function<bool(const Eigen::VectorXd& u2, double rho2)> check;
};

// ADMM over every column of x from `start` (null or empty: a cold start),
// with `out` added to its stopping rule. Inputs are checked by the caller
// (admm_solve). Fills every field of the result but working_set.
admm_result solve_all(const design_matrix& x, const Eigen::VectorXd& y, const penalty& pen,
                      const admm_options& options, const admm_monitor& monitor,
                      const admm_state* start, const left_out& out = {});

}  // namespace merak::svm::detail
