#pragma once
// A regularisation path: one fit per lambda of a grid on one machine, each
// warm-started from the ADMM state of the previous lambda (the grid is
// walked from the largest lambda down: sparse fits first, each a small step
// from the last). Optionally cross-validated: every fold runs its own
// warm-started path on its training part (standardised on that part), and
// each lambda's held-out predictions are pooled.

#include <functional>
#include <vector>

#include "svm/fit.hpp"

namespace merak::svm {

struct path_point {
  double lambda = 0;
  double theta = 0;      // the penalty's theta at this lambda
  double objective = 0;  // F on the (standardised) full data
  int iterations = 0;
  bool converged = false;
  int64_t nnz = 0;
  double accuracy = 0;  // on the training data
  double time_s = 0;    // this lambda's solve (warm-started)
  // With folds >= 2:
  double cv_accuracy = -1;  // pooled over the held-out samples
  double cv_mean_nnz = 0;
  double cv_time_s = 0;                  // this lambda's solves over all folds
  std::vector<double> cv_fold_accuracy;  // each fold's held-out accuracy
  bool lla = false;                      // a nonconvex penalty fitted by LLA (else direct)
};

struct path_options {
  fit_options fit;  // pen.lambda is ignored; workers must be 1
  std::vector<double> lambdas;
  int folds = 0;  // 0: no cross-validation; otherwise >= 2 (fold of i: i mod folds)
  // With folds: sample i's fold, when given (n entries in [0, folds); e.g.
  // stratified_folds in svm/select.hpp); empty: i mod folds.
  std::vector<int> fold_of;
  bool warm = true;  // false: every lambda from a cold start (for comparison)
  // fit.pen.theta is a multiple of lambda: lambda i is fitted with theta =
  // fit.pen.theta * lambdas[i] (e.g. capped-L1's cap at 2 lambda, the way
  // SCAD's a and MCP's gamma place their knots at multiples of lambda).
  bool theta_per_lambda = false;
  // false (with folds >= 2): skip the path on all the data; the points carry
  // only lambda, theta and the CV fields (what a CV comparison needs: a
  // sixth less work with 5 folds).
  bool full_fit = true;
};

// The penalty of every lambda of o's grid, largest lambda first (theta
// scaled by lambda with theta_per_lambda). Throws merak::error for an empty
// or non-positive grid, or a penalty out of range at some lambda (naming it).
std::vector<penalty> path_penalties(const path_options& o);

// Returns one point per lambda, largest lambda first; on_point (when set) is
// called with each full-data point as soon as it is known (after all folds;
// without full_fit, with each point once all folds are done).
// Throws merak::error for an empty or non-positive grid, workers > 1,
// full_fit false without folds, or
// what fit / cross_validate would reject.
std::vector<path_point> fit_path(const dataset& d, const path_options& o,
                                 const std::function<void(const path_point&)>& on_point = {});

}  // namespace merak::svm
