#pragma once
// A regularisation path: one fit per lambda of a grid, each warm-started
// from the state of the previous lambda (the grid is walked from the largest
// lambda down: sparse fits first, each a small step from the last).
// Optionally cross-validated: every fold runs its own path on its training
// part, and each lambda's held-out predictions are pooled.
//
// One driver (fit_path over a path_backend) owns the walk: which rows are
// fitted in which order, warm starts, and the CV bookkeeping. A backend holds
// the data and solves: on one machine (svm/local_path_backend.hpp) or by
// consensus over worker processes (actors/svm_remote_backend.hpp).

#include <cstdint>
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
  double cv_mean_iterations = 0;
  double cv_time_s = 0;                  // this lambda's solves over all folds
  std::vector<double> cv_fold_accuracy;  // each fold's held-out accuracy
  bool lla = false;                      // a nonconvex penalty fitted by LLA (else direct)
};

// What a backend reports of one fit on the rows it holds.
struct path_fit {
  double objective = 0;  // F on the rows fitted (standardised when the backend standardises)
  int iterations = 0;
  bool converged = false;
  int64_t nnz = 0;      // non-zero weights
  double accuracy = 0;  // on the rows fitted; a backend may leave it 0 on a fold's rows
  double time_s = 0;    // the fit, from its start (set-up included) to its end
  bool lla = false;     // a nonconvex penalty fitted by LLA (else direct)
};

// The last fit's predictions (+1 when x^T w + b >= 0) on the held-out rows
// of the fold the backend holds.
struct held_out_score {
  int64_t right = 0;    // predictions equal to the label
  int64_t samples = 0;  // held-out rows
  int64_t nnz = 0;      // non-zero weights of the model scored
  double time_s = 0;    // the scoring, when the backend counts it in the CV time
};

// What the path driver needs from whatever holds the data and solves. A
// backend holds one row selection at a time; fits on it may continue from
// one another. Called from one thread; errors are merak::error.
class path_backend {
 public:
  virtual ~path_backend() = default;
  // The rows the next fits use: fold `fold`'s training part of `folds`
  // (folds 0: all rows). The first fit on a new selection starts cold.
  virtual void select_rows(int folds, int fold) = 0;
  // Fits `pen` on the selected rows. warm: continue from the state the last
  // fit on these rows ended in, where the backend can (else a cold start);
  // false: a cold fit.
  virtual path_fit fit(const penalty& pen, bool warm) = 0;
  // The last fit scored on the held-out rows of the selected fold (folds >= 2).
  virtual held_out_score score_held_out() = 0;
};

// How the driver walks a grid.
struct path_schedule {
  // 0: no cross-validation; otherwise >= 2 folds, each fold's training rows
  // fitted and its held-out rows scored.
  int folds = 0;
  // true: each row selection (fold 0, ..., fold F-1, then all rows) walks
  // the whole grid, every fit continuing from the last. false: one cold fit
  // per penalty and selection, each penalty finished (its folds, then its
  // fit on all rows) before the next.
  bool warm = true;
  // false (with folds >= 2): no fit on all rows; the points carry only
  // lambda, theta, lla and the CV fields.
  bool full_fit = true;
};

// The driver: fits every penalty of `penalties` (in their order) by `backend` as
// `schedule` says and returns one point per penalty. on_point (when set) is
// called with (i, point of penalties[i]) as soon as it is known: with full_fit
// right after penalties[i]'s fit on all rows, before the backend is called again
// (a backend may hand out more of that fit there); without it, once all
// folds of penalties[i] are done. Throws merak::error for an empty grid, folds 1
// or negative, full_fit false without folds, a fold that holds out no
// samples, and what the backend throws (with more than one penalty, an error
// inside a penalty's fits starts with "lambda L: ").
std::vector<path_point> fit_path(
    const std::vector<penalty>& penalties, const path_schedule& schedule, path_backend& backend,
    const std::function<void(size_t, const path_point&)>& on_point = {});

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

// The penalty of every lambda of options' grid, largest lambda first (theta
// scaled by lambda with theta_per_lambda). Throws merak::error for an empty
// or non-positive grid, or a penalty out of range at some lambda (naming it).
std::vector<penalty> path_penalties(const path_options& options);

// The path on one machine: the driver over a local_path_backend of `d`, the
// nonconvex method resolved on all of d. Returns one point per lambda,
// largest lambda first; on_point (when set) is called with each point as
// the driver's is. Throws merak::error for an empty or non-positive grid,
// workers > 1, full_fit false without folds, folds out of range, a fold that
// holds no samples, or what fit / cross_validate would reject.
std::vector<path_point> fit_path(const dataset& d, const path_options& options,
                                 const std::function<void(const path_point&)>& on_point = {});

}  // namespace merak::svm
