#pragma once
// When and how much to rescale both ADMM penalties (rho1, rho2) together.
// Scaling both by one factor keeps their ratio, so a cached factorisation of
// (rho1/rho2) I + M^T M stays valid; the scaled duals are divided by it.
//
//   balancing  (iterations <= balance_until, every balance_every): Boyd's
//              residual balancing, x factor when primal > mu * dual, / factor
//              when dual > mu * primal (never taking rho1 below the
//              penalty's threshold);
//   stall      (afterwards, every stall_window iterations; off unless
//              stall_factor > 1): when primal + dual has not fallen to
//              stall_ratio of its value one window ago, x stall_factor.
//              Measured: it drives rho up without bound on nonconvex fits
//              and worsens the objective, hence off by default.

namespace merak::svm {

struct rho_control_options {
  bool enabled = true;
  int balance_every = 10;
  int balance_until = 1000;
  double balance_mu = 10;
  double balance_factor = 2;
  int stall_window = 100;
  double stall_ratio = 0.5;
  double stall_factor = 1.0;
  double max_rho1 = 1e6;
};

class rho_control {
 public:
  rho_control(rho_control_options options, double rho1_floor) : o_(options), floor_(rho1_floor) {}
  // The factor to multiply both rhos by after iteration `it` (1: keep).
  double factor(int it, double primal, double dual, double rho1);
  int changes() const { return changes_; }

 private:
  rho_control_options o_;
  double floor_;
  double window_start_ = -1;
  int changes_ = 0;
};

}  // namespace merak::svm
