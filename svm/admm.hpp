#pragma once
// Two-block ADMM for the penalised hinge-loss SVM
//   min_{w,b} (1/n) sum_i max(0, 1 - y_i (x_i^T w + b)) + sum_j P(w_j),
// as docs/svm.md describes it: split
// r = 1 - Y(Xw + b1) and z = w, columns centred implicitly, the w-system
// factored once (w_step.hpp). Returns (z, b): z is exactly sparse.

#include <functional>

#include "svm/dataset.hpp"
#include "svm/penalty.hpp"
#include "svm/rho_control.hpp"
#include "svm/w_step.hpp"

namespace merak::svm {

struct admm_options {
  double rho1 = 0;  // 0: default_rhos()
  double rho2 = 0;
  double abs_tol = 1e-5;  // Boyd's epsilon_abs (per sqrt(n + p))
  double rel_tol = 1e-4;  // Boyd's epsilon_rel
  int max_iter = 5000;
  w_method method = w_method::automatic;
  int64_t dense_limit = 4000;  // largest min(n, p) factored densely by `automatic`
  cg_options cg;
  // Residual balancing, then growth of rho when the residuals stall.
  rho_control_options rho_control;
  // Nonconvex penalties: first converge with L1 (same lambda), then switch.
  // Measured: lands on worse stationary points than a cold start; off.
  bool l1_start = false;
  // Finish with the exact best bias for the returned z (never worsens F).
  bool polish_bias = true;
  // Over-relaxation alpha in [1, 2) (Boyd et al. 3.4.3): the z- and r-steps
  // see alpha (w, m) + (1 - alpha)(z_prev, 1 - r_prev). 1: plain ADMM.
  double relaxation = 1.0;
  // Weighted L1 (used by lla_solve): with pen.kind == l1 and this non-empty
  // (p entries >= 0), coordinate j is penalised by lambda * l1_weights[j].
  Eigen::VectorXd l1_weights;
  // Woodbury w-step on dense data: carry X_c z and X_c u1 between iterations
  // instead of forming X_c (z - u1) (one dense product per iteration less).
  bool track_products = true;
  // Dense data (when the products are not tracked): one fused pass over the
  // rows per iteration forms X_c w, the hinge step and the next X_c^T t
  // (admm_columns.cpp, fused_row_pass); false: two matrix-vector products.
  bool fuse_rows = true;
  // Working sets for wide data (p >= screen_ratio * n) with the (weighted)
  // L1 penalty, i.e. L1 fits and every LLA step: ADMM runs on the columns
  // likely to be non-zero, the KKT conditions of the full problem are checked
  // on the others with the dual of the hinge split, and violators join the
  // set (warm restart) until none is left. The result is the full problem's
  // optimum to the same tolerance; an iteration costs O(n |set|), not O(n p).
  bool screening = true;
  double screen_ratio = 4;
};

// Where an ADMM run stopped: enough to continue it (a warm start along a
// lambda path, or between reweighted L1 solves). The scaled duals belong to
// the rhos stored with them.
struct admm_state {
  Eigen::VectorXd z, u1;  // (p)
  Eigen::VectorXd r, u2;  // (n)
  double rho1 = 0, rho2 = 0;
  bool empty() const { return z.size() == 0; }
};

struct admm_result {
  Eigen::VectorXd w;  // (p) the penalised copy z: exact zeros
  double b = 0;
  double objective = 0;  // F(w, b)
  int iterations = 0;
  bool converged = false;
  double primal_residual = 0, dual_residual = 0;
  double rho1 = 0, rho2 = 0;  // final values
  w_method method = w_method::automatic;
  int64_t cg_iterations = 0;
  double time_s = 0;
  int rho_changes = 0;
  // ADMM runs: the working sets' rounds (1 without screening; lla_solve adds
  // up its steps' runs), and the last set's size (p without screening).
  int screen_rounds = 1;
  int64_t working_set = 0;
  admm_state state;  // for a warm start of a related problem
  int64_t nnz() const { return (w.array() != 0).count(); }
};

// rho defaults for standardised data with n samples: rho2 = 10/n clamped to
// 0.01-0.1 (the spec's advice for a hinge scaled by 1/n); rho1 for L1 (and
// LLA's steps) 10 when n < p, 3 when n >= p; max(1, twice the prox
// threshold) for the nonconvex penalties' direct ADMM.
void default_rhos(int64_t n, int64_t p, const penalty& pen, double& rho1, double& rho2);

// The KKT violation threshold of screening: a left-out column j whose
// gradient |rho2 (X_c^T (y .* u2))_j| exceeds lambda_j (1 + screen_slack)
// joins the working set.
inline constexpr double screen_slack = 1e-3;
// How often (iterations) a working set's ADMM checks the left-out columns.
inline constexpr int screen_check_every = 100;

// Called every iteration (when set) with the iteration number and residuals;
// return false to stop early.
using admm_monitor = std::function<bool(int iter, double primal, double dual)>;

// x: (n, p), y: (n) in {-1, +1}. start: a state of an earlier run on the
// same x, y (any penalty or lambda) to continue from, with its rhos unless
// options.rho1 / options.rho2 are set; nullptr or empty: cold start at zero. Throws
// merak::error for empty data, labels other than +-1, a start of the wrong
// size, or invalid options.
admm_result admm_solve(const design_matrix& x, const Eigen::VectorXd& y, const penalty& pen,
                       const admm_options& options, const admm_monitor& monitor = {},
                       const admm_state* start = nullptr);

// r = argmin (1/n)(r)_+ + (rho2/2)(r - v)^2 elementwise, tau = 1/(n rho2):
// v - tau if v > tau; 0 if 0 <= v <= tau; v if v < 0.
void hinge_prox(const Eigen::VectorXd& v, double tau, Eigen::VectorXd& r);

}  // namespace merak::svm
