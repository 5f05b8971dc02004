#pragma once
// Solvers of the ADMM w-system  (rho1 I + rho2 M^T M) w = q  for M a
// design_operator (d columns, n rows):
//   cholesky  - factor the d x d matrix once (best when n >= d);
//   woodbury  - factor (rho1/rho2) I_n + M M^T once and apply
//               (q - M^T C^-1 (M q)) / rho1 (best when n < d);
//   cg        - Jacobi-preconditioned conjugate gradients, matrix free, warm
//               started from the previous w (for n and d both large).
// A change of rho refactors (from the cached Gram matrix) or, for CG, is free.

#include <memory>
#include <string>
#include <string_view>

#include "svm/design_operator.hpp"

namespace merak::svm {

enum class w_method { automatic, cholesky, woodbury, cg };
w_method parse_w_method(std::string_view name);  // "auto", "cholesky", "woodbury", "cg"
const char* w_method_name(w_method m);

struct cg_options {
  // Stop when |residual| <= tol * |q|, tol = the hint given to solve()
  // clamped to [rel_tol, max_rel_tol]. ADMM hints a tolerance that shrinks
  // with its own residuals (inexact ADMM): loose early, tight at the end.
  double rel_tol = 1e-8;
  double max_rel_tol = 1e-3;
  int max_iter = 500;
};

class w_solver {
 public:
  virtual ~w_solver() = default;
  virtual void set_rho(double rho1, double rho2) = 0;
  // w: on entry a warm start (used by CG), on exit the solution. tol_hint:
  // the relative accuracy the caller needs (used by CG; 0: the tightest).
  virtual void solve(const Eigen::VectorXd& q, Eigen::VectorXd& w, double tol_hint = 0) = 0;
  // The ADMM form: solves for q = rho1 a + rho2 M^T t (a: d, t: n) and also
  // returns mw = M w (n). The default forms q and multiplies; Woodbury fuses
  // it into one product with M and one with M^T, using its cached M M^T.
  virtual void solve_split(const Eigen::VectorXd& a, const Eigen::VectorXd& t, Eigen::VectorXd& w,
                           Eigen::VectorXd& mw, double tol_hint = 0);
  // solve_split with ma = M a supplied by the caller (who may know it
  // cheaply); by default ignores ma. Woodbury then needs one product with
  // M^T and none with M per call.
  virtual void solve_split_given(const Eigen::VectorXd& a, const Eigen::VectorXd& ma,
                                 const Eigen::VectorXd& t, Eigen::VectorXd& w, Eigen::VectorXd& mw,
                                 double tol_hint = 0) {
    (void)ma;
    solve_split(a, t, w, mw, tol_hint);
  }
  // w for q = rho1 a + rho2 mt, with mt = M^T t computed by the caller
  // (solve_all's fused pass over the rows forms it with M w).
  void solve_given_mt(const Eigen::VectorXd& a, const Eigen::VectorXd& mt, Eigen::VectorXd& w,
                      double tol_hint = 0) {
    q_ = rho1_ * a + rho2_ * mt;
    solve(q_, w, tol_hint);
  }
  virtual w_method method() const = 0;
  // Iterations of the inner solver so far (CG); 0 for direct solvers.
  virtual int64_t inner_iterations() const { return 0; }

 protected:
  w_solver(const design_operator& m, double rho1, double rho2) : m_(m), rho1_(rho1), rho2_(rho2) {}
  const design_operator& m_;
  double rho1_, rho2_;  // kept current by each set_rho
  Eigen::VectorXd q_;
};

// `automatic` picks cholesky when d <= n and d <= dense_limit, woodbury when
// n < d and n <= dense_limit, cg otherwise. m must outlive the solver.
std::unique_ptr<w_solver> make_w_solver(const design_operator& m, w_method method, double rho1,
                                        double rho2, int64_t dense_limit = 4000,
                                        cg_options cg = {});

}  // namespace merak::svm
