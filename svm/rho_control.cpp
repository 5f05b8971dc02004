#include "svm/rho_control.hpp"

namespace merak::svm {

double rho_control::factor(int it, double primal, double dual, double rho1) {
  if (!o_.enabled) return 1;
  double f = 1;
  if (it <= o_.balance_until) {
    if (it % o_.balance_every != 0) return 1;
    if (primal > o_.balance_mu * dual)
      f = o_.balance_factor;
    else if (dual > o_.balance_mu * primal && rho1 / o_.balance_factor > floor_)
      f = 1 / o_.balance_factor;
  } else if (o_.stall_factor > 1 && it % o_.stall_window == 0) {
    const double now = primal + dual;
    if (window_start_ >= 0 && now > o_.stall_ratio * window_start_) f = o_.stall_factor;
    window_start_ = now;
  }
  if (f > 1 && rho1 * f > o_.max_rho1) f = 1;
  if (f != 1) ++changes_;
  return f;
}

}  // namespace merak::svm
