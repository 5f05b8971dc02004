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

// How a nonconvex penalty is fitted on one machine.
//   lla       reweighted L1 from the L1 fit (lla.hpp): on wide data the
//             direct ADMM lands on poor stationary points (golub);
//   direct    ADMM with the nonconvex prox (the spec's algorithm);
//   automatic lla when the data has more features than samples, direct
//             otherwise (see resolve_nonconvex). Measured (eighth session; sonar, heart_scale and
//             ionosphere, 4 lambdas x 7 penalty settings each, full data):
//             direct reached a lower objective in 26 of 84 fits, the same
//             (0.1%) in 41 and a higher one in 17 (7 by more than 2%, mostly
//             at lambda 0.01 where it stops at the iteration cap), 1.3% lower
//             in geometric mean, in 3.4x less time.
enum class nonconvex_method { automatic, lla, direct };
nonconvex_method parse_nonconvex_method(std::string_view name);  // "auto", "lla", "direct"
const char* nonconvex_method_name(nonconvex_method m);
// Whether a fit of n samples and p features runs LLA.
bool uses_lla(nonconvex_method m, int64_t n, int64_t p);
// automatic resolved for a data set of n samples and p features (lla or
// direct; others unchanged). Cross-validation and paths resolve it once on
// the whole data set, so that the folds score the method the fit on all
// rows uses (a fold's training rows can be fewer than p when n is not).
nonconvex_method resolve_nonconvex(nonconvex_method m, int64_t n, int64_t p);

struct fit_options {
  penalty pen;
  admm_options admm;
  bool standardize = true;
  int workers = 1;  // > 1: consensus ADMM over `workers` row shards
  // Nonconvex penalties on one machine (above). Consensus fits are always
  // direct.
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
  bool lla = false;         // a nonconvex penalty fitted by LLA (one machine)
};

fit_result fit(const dataset& d, const fit_options& o);

// Stores x densely when at least half its entries are non-zero and it has at
// most 2^24 entries (128 MB): LIBSVM text is read as CSR even when every
// feature is present (z-scored golub / westbc), and dense products are both
// faster and what the Woodbury step's carried products need. Returns whether
// it converted. fit() and fit_path() apply it to their working copy.
bool densify_if_dense(design_matrix& x);

// Threads of the solver's matrix products (Eigen's OpenMP pool); n <= 0
// keeps the default (all cores). One thread is faster on a machine that is
// already busy: OpenMP barriers wait on descheduled peers (measured on the
// 20000 x 50000 sparse problem with the load at 5 on 2 cores: 23 s on one
// thread, 90 s on two).
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
cv_result cross_validate(const dataset& d, int folds, const fit_options& o);

// The rows of fold `fold`'s training and held-out parts over n samples
// (sample i is held out in fold i mod folds), in ascending order. Shared by
// cross_validate and the worker processes of `svm train --procs K --folds F`
// (actors/svm_worker_actor.cpp), so both split alike. Throws merak::error
// for folds < 2, folds > n or a fold out of range.
void cv_split(int64_t n, int folds, int fold, std::vector<int64_t>& train,
              std::vector<int64_t>& test);

}  // namespace merak::svm
