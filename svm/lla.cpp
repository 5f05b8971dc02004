#include "svm/lla.hpp"

#include <chrono>

#include "core/error.hpp"
#include "svm/objective.hpp"

namespace merak::svm {

admm_result lla_solve(const design_matrix& x, const Eigen::VectorXd& y, const penalty& pen,
                      const admm_options& o, const lla_options& lo, const admm_state* start) {
  if (pen.kind == penalty_kind::l1 || pen.lambda == 0) return admm_solve(x, y, pen, o, {}, start);
  pen.validate();
  if (lo.max_steps < 0) fail("lla max_steps must not be negative (got {})", lo.max_steps);
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t p = x.cols();
  const penalty l1{penalty_kind::l1, pen.lambda, 0};
  admm_options wo = o;
  wo.l1_start = false;
  // Step 0 is the LLA step from w = 0: every weight P'(0+) / lambda, which is
  // 1 (the L1 fit at lambda) for SCAD, MCP and capped-L1 and 1/theta for LSP.
  const double w0 = lo.start_from_zero ? pen.slope(0) / pen.lambda : 1.0;
  Eigen::VectorXd weights = Eigen::VectorXd::Constant(p, w0);
  if (w0 != 1.0) wo.l1_weights = weights;
  // The convex steps run at L1's rho defaults unless the caller fixed them.
  admm_result cur = admm_solve(x, y, l1, wo, {}, start);
  int iterations = cur.iterations;
  int64_t cg = cur.cg_iterations;
  int rounds = cur.screen_rounds;
  double f = objective(x, y, cur.w, cur.b, pen);
  bool settled = false;
  for (int k = 0; k < lo.max_steps; ++k) {
    Eigen::VectorXd next(p);  // (p) P'(|w_j|) / lambda
    for (Eigen::Index j = 0; j < p; ++j) next[j] = pen.slope(cur.w[j]) / pen.lambda;
    if ((next - weights).cwiseAbs().maxCoeff() == 0) {
      settled = true;
      break;
    }
    weights = std::move(next);
    wo.l1_weights = weights;
    admm_result step = admm_solve(x, y, l1, wo, {}, &cur.state);
    iterations += step.iterations;
    cg += step.cg_iterations;
    rounds += step.screen_rounds;
    const double f_step = objective(x, y, step.w, step.b, pen);
    // The majoriser is only minimised to the ADMM tolerance: keep the better.
    const bool better = f_step <= f;
    const bool small = f - f_step <= lo.rel_tol * std::max(std::abs(f), 1e-12);
    if (better) cur = std::move(step), f = f_step;
    if (small || !better) {
      settled = true;
      break;
    }
  }
  cur.iterations = iterations;
  cur.cg_iterations = cg;
  cur.screen_rounds = rounds;
  cur.converged = cur.converged && settled;
  cur.objective = f;
  cur.time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return cur;
}

}  // namespace merak::svm
