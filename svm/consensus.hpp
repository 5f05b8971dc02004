#pragma once
// Consensus ADMM maths (docs/svm.md, "Multi-process consensus"), as pure
// classes that actors (or a plain loop, see consensus_fit) drive:
//
//   worker k:   theta_k = (rho1 I + rho2 A_k^T A_k)^-1
//                         [rho1 (zeta - U1_k) + rho2 A_k^T (1 - r_k - U2_k)]
//               send theta_k + U1_k                         (p + 1 numbers)
//   consensus:  v = mean_k (theta_k + U1_k); z = prox_{P/(K rho1)}(v_1:p);
//               beta = v_p+1; broadcast zeta = [z; beta]
//   worker k:   m_k = A_k theta_k; r_k = hinge_prox(1 - m_k - U2_k, 1/(n rho2))
//               U1_k += theta_k - zeta; U2_k += r_k + m_k - 1
//
// with A_k = Y_k [X_k, 1]. Each object is used from one thread (actor) at a
// time; they share nothing.

#include <memory>
#include <vector>

#include <functional>

#include "svm/dataset.hpp"
#include "svm/lla.hpp"
#include "svm/penalty.hpp"
#include "svm/rho_control.hpp"
#include "svm/w_step.hpp"

namespace merak::svm {

struct consensus_options {
  double rho1 = 0, rho2 = 0;  // 0: default_rhos() of the whole data set
  double abs_tol = 1e-5, rel_tol = 1e-4;
  int max_iter = 5000;
  w_method method = w_method::automatic;
  int64_t dense_limit = 4000;
  bool polish_bias = true;
  bool l1_start = false;  // as admm_options::l1_start
  // Decided by the consensus side and sent with zeta (the same rule as the
  // single-machine solver).
  rho_control_options rho_control;
  // Nonconvex penalties: LLA (weighted-L1 consensus runs, each continuing
  // from the last; consensus_solve) or the direct nonconvex prox. Callers
  // that cross-validate resolve `automatic` on the whole data set first.
  nonconvex_method nonconvex = nonconvex_method::automatic;
  lla_options lla;
};

// What a worker reports after its dual update (summed over workers by the
// consensus side for the stopping test).
struct worker_residuals {
  double primal_sq = 0;      // |theta_k - zeta|^2 + |r_k + m_k - 1|^2
  double r_change_sq = 0;    // |r_k - r_k_prev|^2
  double local_norm_sq = 0;  // |theta_k|^2 + |m_k|^2
  double aux_norm_sq = 0;    // |r_k|^2 (+ |zeta|^2 added by the consensus side)
  double dual_norm_sq = 0;   // |U1_k|^2 rho1^2 + |U2_k|^2 rho2^2
  int64_t rows = 0;
  void add(const worker_residuals& other);
};

class consensus_worker {
 public:
  // shard: this worker's rows; n_total: rows over all workers (the hinge is
  // scaled by 1/n_total). Factors the local system once.
  consensus_worker(dataset shard, int64_t n_total, double rho1, double rho2, w_method method,
                   int64_t dense_limit);
  int64_t dim() const { return p_ + 1; }
  // theta-step from the current consensus zeta (p + 1); returns theta + U1.
  const Eigen::VectorXd& local_step(const Eigen::VectorXd& zeta);
  // r and dual updates against the new zeta.
  worker_residuals dual_step(const Eigen::VectorXd& zeta);
  // Multiplies both rhos by f (the scaled duals are divided by it).
  void scale_rho(double f);
  // Undoes the last local_step's effect on later ones (the CG w-step starts
  // from the last theta): for a caller that ran local_step ahead of a
  // scale_rho and must run it again after (actors/svm_worker_actor.cpp
  // overlaps the next local step with the dual step).
  void retract_local_step() { theta_ = theta_start_; }
  const dataset& shard() const { return shard_; }

 private:
  dataset shard_;
  int64_t p_, n_total_;
  double rho1_, rho2_;
  std::unique_ptr<design_operator> a_;  // [X_k, 1]
  std::unique_ptr<w_solver> solver_;
  Eigen::VectorXd theta_, u1_, r_, u2_, m_, mtheta_, send_, tmp_, q_, theta_start_;
};

// The consensus side: averages, proxes, and decides after each iteration
// whether to stop and whether to rescale rho (which it tells the workers).
struct consensus_decision {
  bool stop = false;  // converged, or the iteration cap reached
  bool converged = false;
  double rho_factor = 1;  // != 1: every worker must scale_rho(rho_factor)
  double primal = 0, dual = 0;
};

// Where a consensus run ended, for the next run on the same workers (which
// keep theta, r and their scaled duals): zeta (empty before a first run)
// and the rhos the workers now have.
struct consensus_carry {
  Eigen::VectorXd zeta;
  double rho1 = 0, rho2 = 0;
};

class consensus_reducer {
 public:
  // n_total: rows over all workers.
  consensus_reducer(int64_t p, int64_t n_total, int workers, penalty pen, double rho1, double rho2,
                    const consensus_options& options);
  // A run that continues from `from` (its zeta when it has one, and its
  // rhos): a warm start with workers that kept their state from the run
  // that ended there.
  consensus_reducer(int64_t p, int64_t n_total, int workers, penalty pen,
                    const consensus_carry& from, const consensus_options& options);
  // zeta = [prox_{P/(K rho1)}(v_1:p); v_p+1] from the K contributions.
  const Eigen::VectorXd& combine(const std::vector<Eigen::VectorXd>& contributions);
  // After every worker's dual_step against the last zeta: the Boyd test on
  // the summed residuals, phase switch (l1_start) and rho control.
  consensus_decision finish(const worker_residuals& sum);
  const Eigen::VectorXd& zeta() const { return zeta_; }
  // Weighted L1 (an LLA step; the penalty must be L1): coordinate j is
  // penalised by lambda * weights[j] (p entries >= 0).
  void set_l1_weights(const Eigen::VectorXd& weights);
  // Where this run stands, for a next run on the same workers.
  consensus_carry carry() const { return {zeta_, rho1_, rho2_}; }
  // |zeta - zeta_prev| of the last combine.
  double change_norm() const { return change_; }
  int iteration() const { return it_; }
  double rho1() const { return rho1_; }
  double rho2() const { return rho2_; }

 private:
  int64_t p_, n_;
  int k_;
  penalty pen_, active_;
  double rho1_, rho2_;
  consensus_options o_;
  rho_control control_;
  bool l1_phase_;
  int it_ = 0, phase_start_ = 0;
  Eigen::VectorXd zeta_, v_, z_, weights_;
  double change_ = 0;
};

// Resolved set-up shared by the loop and the actors: rhos (defaults filled
// in) and the rows of each worker (K contiguous blocks). Throws merak::error
// for K < 1 or K > n, or an invalid penalty.
struct consensus_setup {
  double rho1 = 0, rho2 = 0;
  std::vector<std::vector<int64_t>> rows;  // per worker
};
consensus_setup plan_consensus(const dataset& d, int workers, const penalty& pen,
                               const consensus_options& options);
// The pieces of plan_consensus for a consensus side that holds no data
// (worker processes read their own rows): the rows of worker k of K over n
// samples, [n k / K, n (k + 1) / K), and the rhos for n samples of p features
// (L1's when the fit runs LLA: its steps are weighted-L1 fits).
std::vector<int64_t> consensus_shard_rows(int64_t n, int workers, int k);
void consensus_rhos(int64_t n, int64_t p, int workers, const penalty& pen,
                    const consensus_options& options, double& rho1, double& rho2);

struct consensus_result {
  Eigen::VectorXd w;  // (p)
  double b = 0;
  double objective = 0;  // F over the whole data set
  int iterations = 0;
  bool converged = false;
  double primal_residual = 0, dual_residual = 0;
  double time_s = 0;
  double rho1 = 0, rho2 = 0;  // final values
  int64_t nnz() const { return (w.array() != 0).count(); }
};

// The whole consensus iteration as a plain loop over K in-process workers
// (rows split into K contiguous blocks): the reference the actors are tested
// against. Throws merak::error for K < 1 or K > n.
consensus_result consensus_fit(const dataset& d, int workers, const penalty& pen,
                               const consensus_options& options);

// Fills in w, b (polished when options.polish_bias), objective and rho from the
// reducer's final state; iterations/converged/residuals/time are the caller's.
void finish_consensus_result(const dataset& d, const penalty& pen, const consensus_options& options,
                             const consensus_reducer& red, consensus_result& res);

// One consensus run to its end on a driver's workers: the reducer for
// `rpen` (with L1 weights when `weights` is set), started from `carry`
// (its zeta when it has one, its rhos), which it then updates. Fills res:
// w, b (polished), objective = F with the fit's target penalty (not rpen),
// iterations, converged, residuals, rhos.
using consensus_run = std::function<void(const penalty& rpen, const Eigen::VectorXd* weights,
                                         consensus_carry& carry, consensus_result& res)>;

// pen's consensus fit through `run`: one run with pen's prox (direct), or
// LLA (uses_lla with options.nonconvex): lla_loop over weighted-L1 runs at pen.lambda,
// each continuing from the last. `carry` is the start (its rhos must be the
// ones the workers were set up with: consensus_rhos, or a previous fit's
// end) and ends where the last run ended (LLA: possibly a step that was
// not kept). iterations add up all runs; converged: the kept run converged
// and (LLA) the weights settled.
consensus_result consensus_solve(int64_t n, int64_t p, const penalty& pen,
                                 const consensus_options& options, consensus_carry& carry,
                                 const consensus_run& run);

}  // namespace merak::svm
