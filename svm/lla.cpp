#include "svm/lla.hpp"

#include <chrono>

#include "core/error.hpp"
#include "svm/objective.hpp"

namespace merak::svm {

nonconvex_method parse_nonconvex_method(std::string_view name) {
  if (name == "auto") return nonconvex_method::automatic;
  if (name == "lla") return nonconvex_method::lla;
  if (name == "direct") return nonconvex_method::direct;
  fail("--nonconvex must be auto, lla or direct (got '{}')", name);
}

const char* nonconvex_method_name(nonconvex_method m) {
  switch (m) {
    case nonconvex_method::automatic:
      return "auto";
    case nonconvex_method::lla:
      return "lla";
    case nonconvex_method::direct:
      return "direct";
  }
  return "?";
}

nonconvex_method resolve_nonconvex(nonconvex_method m, int64_t n, int64_t p, penalty_kind kind) {
  if (m != nonconvex_method::automatic) return m;
  return p > n || kind == penalty_kind::lsp ? nonconvex_method::lla : nonconvex_method::direct;
}

lla_start parse_lla_start(std::string_view name) {
  if (name == "best") return lla_start::best;
  if (name == "zero") return lla_start::zero;
  if (name == "l1") return lla_start::l1;
  fail("--lla-start must be best, zero or l1 (got '{}')", name);
}

const char* lla_start_name(lla_start s) {
  switch (s) {
    case lla_start::best:
      return "best";
    case lla_start::zero:
      return "zero";
    case lla_start::l1:
      return "l1";
  }
  return "?";
}

bool uses_lla(const penalty& pen, nonconvex_method m, int64_t n, int64_t p) {
  return pen.kind != penalty_kind::l1 && pen.lambda != 0 &&
         resolve_nonconvex(m, n, p, pen.kind) == nonconvex_method::lla;
}

admm_result lla_solve(const design_matrix& x, const Eigen::VectorXd& y, const penalty& pen,
                      const admm_options& options, const lla_options& lo, const admm_state* start) {
  if (pen.kind == penalty_kind::l1 || pen.lambda == 0)
    return admm_solve(x, y, pen, options, {}, start);
  pen.validate();
  if (lo.max_steps < 0) fail("lla max_steps must not be negative (got {})", lo.max_steps);
  const auto t0 = std::chrono::steady_clock::now();
  const penalty l1{penalty_kind::l1, pen.lambda, 0};
  admm_options wo = options;
  wo.l1_start = false;
  // The convex steps run at L1's rho defaults unless the caller fixed them;
  // each continues from the last step's ADMM state.
  int iterations = 0, rounds = 0;
  int64_t cg = 0;
  admm_state last;
  const auto step = [&](const Eigen::VectorXd* weights) {
    wo.l1_weights = weights ? *weights : Eigen::VectorXd();
    admm_result r = admm_solve(x, y, l1, wo, {}, last.empty() ? start : &last);
    iterations += r.iterations, cg += r.cg_iterations, rounds += r.screen_rounds;
    r.objective = objective(x, y, r.w, r.b, pen);
    last = r.state;
    return r;
  };
  // The second chain of lla_start::best starts where the first did.
  const auto restart = [&] { last = admm_state{}; };
  bool settled = false;
  admm_result cur = lla_loop<admm_result>(pen, lo, x.cols(), step, restart, settled);
  cur.iterations = iterations;
  cur.cg_iterations = cg;
  cur.screen_rounds = rounds;
  cur.converged = cur.converged && settled;
  cur.time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return cur;
}

}  // namespace merak::svm
