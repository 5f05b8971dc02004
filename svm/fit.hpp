#pragma once
// Fitting from a data set: standardise (optional), solve by two-block ADMM
// (workers == 1) or by consensus ADMM over `workers` in-process row shards,
// and map the weights back to the data's units. Cross-validation on top.

#include <string_view>
#include <vector>

#include <functional>

#include "svm/admm.hpp"
#include "svm/consensus.hpp"
#include "svm/linear_model.hpp"
#include "svm/lla.hpp"

namespace merak::svm {

struct fit_options {
  penalty pen;
  admm_options admm;
  bool standardize = true;
  int workers = 1;  // > 1: consensus ADMM over `workers` row shards
  // Nonconvex penalties (lla.hpp), on one machine and by consensus
  // (consensus_solve: LLA's steps are weighted-L1 consensus runs).
  nonconvex_method nonconvex = nonconvex_method::automatic;
  lla_options lla_opts;
  // Runs the consensus fit; empty: svm::consensus_fit (a plain loop). The
  // command line plugs in actors::consensus_fit_actors here.
  std::function<consensus_result(const dataset&, int, const penalty&, const consensus_options&)>
      consensus_runner;
};

struct fit_result {
  linear_model model;    // weights in the data's units
  double objective = 0;  // F of the problem solved (on standardised data when standardize)
  int iterations = 0;
  bool converged = false;
  double time_s = 0;
  w_method method = w_method::automatic;
  int64_t cg_iterations = 0;  // inner CG iterations (cg w-step only)
  double rho1 = 0, rho2 = 0;
  int screen_rounds = 1;    // ADMM runs (working-set rounds, every LLA step's)
  int64_t working_set = 0;  // columns of the last run of the step kept (LLA)
  bool lla = false;         // a nonconvex penalty fitted by LLA (else direct)
};

fit_result fit(const dataset& d, const fit_options& options);

// The consensus settings of `options` (ADMM tolerances, rhos, w-step, nonconvex
// method and LLA options), for fits on worker actors or processes.
consensus_options consensus_options_of(const fit_options& options);

// Stores x densely when at least half its entries are non-zero and it has at
// most 2^24 entries (128 MB): LIBSVM text is read as CSR even when every
// feature is present (z-scored golub / westbc), and dense products are both
// faster and what the Woodbury step's carried products need. Returns whether
// it converted. fit() and fit_path() apply it to their working copy.
bool densify_if_dense(design_matrix& x);

// Threads of the solver's matrix products (Eigen's OpenMP pool); n <= 0
// keeps the default (all cores). One thread is faster on a machine that is
// already busy: OpenMP barriers wait on descheduled peers (docs/results/
// svm.md, "Solver design choices").
void set_solver_threads(int n);

// Fold of sample i is i mod folds (deterministic and reproducible by other
// tools, e.g. bench/compare_liblinear.sh); standardisation is computed on
// each training part.
struct cv_result {
  double accuracy = 0;  // pooled over all held-out samples
  std::vector<double> fold_accuracy;
  double mean_nnz = 0, mean_objective = 0, mean_iterations = 0;
  double time_s = 0;  // all folds' fits
};
cv_result cross_validate(const dataset& d, int folds, const fit_options& options);

// The rows of fold `fold`'s training and held-out parts over n samples
// (sample i is held out in fold i mod folds), in ascending order. Shared by
// cross_validate and the worker processes of `svm train --procs K --folds F`
// (actors/svm_worker_actor.cpp), so both split alike. Throws merak::error
// for folds < 2, folds > n or a fold out of range.
void cv_split(int64_t n, int folds, int fold, std::vector<int64_t>& train,
              std::vector<int64_t>& test);

}  // namespace merak::svm
