#pragma once
// Nonconvex penalties by the local linear approximation (LLA; Zou & Li 2008,
// Fan, Xue & Zou 2014): every penalty here is concave and non-decreasing in
// |t|, so P(t) <= P(t_k) + P'(|t_k|)(|t| - |t_k|) and the weighted-L1 problem
//   min (1/n) sum_i hinge_i + sum_j P'(|w_k,j|) |w_j|
// majorises F at w_k. Each step solves that convex problem by the two-block
// ADMM (lla_solve) or by consensus ADMM (svm::consensus_solve), warm-started
// from the previous step's state; F never increases
// (up to the ADMM tolerance) and a fixed point is a stationary point of F.
// The first step is the LLA step from w = 0, the weighted L1 fit with every
// weight P'(0+) (for SCAD, MCP and capped-L1 the L1 fit at the same lambda;
// for LSP, whose slope at 0 is lambda / theta, the L1 fit at lambda /
// theta), and for LSP also the plain L1 fit at lambda (lla_start).
//
// Why not the direct nonconvex ADMM (admm_solve with the nonconvex prox)?
// Measured on golub, westbc and sonar (docs/svm.md): from a cold start it
// settles on stationary points with worse CV accuracy at the lambdas where
// the penalty should pay off, and needs a small rho1 (above the prox
// threshold) that makes it slow; LLA's steps are convex, run at L1's rho and
// reuse the factorisation.

#include <string_view>

#include "svm/admm.hpp"

namespace merak::svm {

// How a nonconvex penalty is fitted (on one machine and by consensus).
//   lla       reweighted L1 from the L1 fit (lla.hpp): on wide data the
//             direct ADMM lands on poor stationary points (golub);
//   direct    ADMM with the nonconvex prox (docs/svm.md);
//   automatic lla for LSP, and for the other penalties when the data has
//             more features than samples; direct otherwise (see
//             resolve_nonconvex). Why, with the fits compared on three data
//             sets: docs/svm.md and docs/results/svm.md.
enum class nonconvex_method { automatic, lla, direct };
nonconvex_method parse_nonconvex_method(std::string_view name);  // "auto", "lla", "direct"
const char* nonconvex_method_name(nonconvex_method m);
// automatic resolved for a penalty of `kind` on a data set of n samples and
// p features (lla or direct; others unchanged). Cross-validation and paths
// resolve it once on the whole data set, so that the folds score the method
// the fit on all rows uses (a fold's training rows can be fewer than p when
// n is not).
nonconvex_method resolve_nonconvex(nonconvex_method m, int64_t n, int64_t p, penalty_kind kind);
// Whether a fit of pen on n samples and p features runs LLA: a nonconvex
// penalty (lambda > 0) whose method resolves to lla (on one machine and by
// consensus alike).
bool uses_lla(const penalty& pen, nonconvex_method m, int64_t n, int64_t p);

// Where LLA's chain of reweighted L1 steps starts. zero: the LLA step from
// w = 0 (every weight P'(0+) / lambda: the L1 fit at lambda for SCAD, MCP and
// capped-L1, at lambda / theta for LSP); l1: the plain L1 fit at lambda; best:
// both chains, the one that ends at the lower F. The starts differ for LSP
// with theta != 1 only (elsewhere best runs one chain). zero is the default
// (reweighted L1 from uniform weights): the L1 start often reaches a lower F
// where the two differ (bench/svm_lsp_methods.sh), but at small theta
// through denser models that predict no better, and best costs two chains
// (docs/results/svm.md, "Solver design choices").
// best or l1 when the objective itself matters (e.g. the chain from zero can
// stop at the empty model when lambda / theta is large).
enum class lla_start { zero, l1, best };
lla_start parse_lla_start(std::string_view name);  // "zero", "l1", "best"
const char* lla_start_name(lla_start s);

struct lla_options {
  int max_steps = 20;     // reweighted L1 solves after the first one, per chain
  double rel_tol = 1e-4;  // stop when F falls by less than this share in a step
  lla_start start = lla_start::zero;
};

// x: (n, p), y: (n). The result's objective is F with `pen`; iterations and
// time add up all ADMM runs (both chains with lla_start::best); converged:
// the ADMM run of the kept step converged and its chain's weights (or F)
// settled within max_steps. start: as admm_solve (a state of
// an earlier fit on the same data, e.g. the previous lambda of a path).
// Throws as admm_solve. For pen.kind == l1 this is admm_solve.
admm_result lla_solve(const design_matrix& x, const Eigen::VectorXd& y, const penalty& pen,
                      const admm_options& options, const lla_options& lo = {},
                      const admm_state* start = nullptr);

// The LLA outer loop, shared by lla_solve and the consensus drivers
// (consensus_solve). step(weights) runs one weighted-L1 fit at pen.lambda
// (coordinate j penalised by lambda * weights[j]; nullptr: the plain L1
// fit), continuing from the state the previous step ended in, and returns
// its result R, which has `w` (p) and `objective`: F with `pen` at the
// step's (w, b). Returns the best step (F never increases; a step that does
// not lower F ends the loop) and sets `settled` when the weights or F
// settled within lo.max_steps. The caller accumulates its own counters.
template <class R, class Step>
R lla_chain(const penalty& pen, const lla_options& lo, int64_t p, double w0, Step& step,
            bool& settled) {
  Eigen::VectorXd weights = Eigen::VectorXd::Constant(p, w0);
  R cur = step(w0 != 1.0 ? &weights : nullptr);
  double f = cur.objective;
  settled = false;
  for (int k = 0; k < lo.max_steps; ++k) {
    Eigen::VectorXd next(p);  // (p) P'(|w_j|) / lambda
    for (Eigen::Index j = 0; j < p; ++j) next[j] = pen.slope(cur.w[j]) / pen.lambda;
    if ((next - weights).cwiseAbs().maxCoeff() == 0) {
      settled = true;
      break;
    }
    weights = std::move(next);
    R s = step(&weights);
    // The majoriser is only minimised to the ADMM tolerance: keep the better.
    const bool better = s.objective <= f;
    const bool small = f - s.objective <= lo.rel_tol * std::max(std::abs(f), 1e-12);
    if (better) cur = std::move(s), f = cur.objective;
    if (small || !better) {
      settled = true;
      break;
    }
  }
  return cur;
}

// The LLA outer loop, shared by lla_solve and the consensus drivers
// (consensus_solve). step(weights) runs one weighted-L1 fit at pen.lambda
// (coordinate j penalised by lambda * weights[j]; nullptr: the plain L1
// fit), continuing from the state the previous step ended in, and returns
// its result R, which has `w` (p) and `objective`: F with `pen` at the
// step's (w, b). Runs the chain(s) lo.start names and returns the best step
// of the chain that ends lower (F never increases along a chain; a step that
// does not lower F ends it); sets `settled` when that chain's weights or F
// settled within lo.max_steps. restart() runs between two chains: a caller
// that can return to its starting state does, so that the second chain is
// the one lla_start::l1 runs alone (a chain depends on where its ADMM runs
// start). The caller accumulates its own counters.
template <class R, class Step, class Restart>
R lla_loop(const penalty& pen, const lla_options& lo, int64_t p, Step&& step, Restart&& restart,
           bool& settled) {
  const double from_zero = pen.slope(0) / pen.lambda;  // 1 but for LSP (1 / theta)
  if (lo.start != lla_start::best || from_zero == 1.0)
    return lla_chain<R>(pen, lo, p, lo.start == lla_start::l1 ? 1.0 : from_zero, step, settled);
  R a = lla_chain<R>(pen, lo, p, from_zero, step, settled);
  restart();
  bool settled_b = false;
  R b = lla_chain<R>(pen, lo, p, 1.0, step, settled_b);
  if (b.objective < a.objective) {
    settled = settled_b;
    return b;
  }
  return a;
}

}  // namespace merak::svm
