#include "svm/admm.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "svm/admm_columns.hpp"

namespace merak::svm {

void hinge_prox(const Eigen::VectorXd& v, double tau, Eigen::VectorXd& r) {
  r = (v.array() > tau).select(v.array() - tau, (v.array() < 0).select(v, 0.0));
}

void default_rhos(int64_t n, int64_t p, const penalty& pen, double& rho1, double& rho2) {
  rho2 = std::clamp(10.0 / double(std::max<int64_t>(n, 1)), 0.01, 0.1);
  // For L1 on wide data a larger rho1 reaches a lower objective at the same
  // tolerance. With n >= p a smaller rho1 (3) needs fewer iterations than 10
  // at the same objective, and a still smaller one (1) needs more again
  // (docs/results/svm.md, "Solver design choices"). The nonconvex
  // penalties' direct ADMM settles on worse stationary points at a large
  // rho1, so it starts small (above the prox threshold) and lets residual
  // balancing raise it.
  const double l1_rho1 = n < p ? 10.0 : 3.0;
  rho1 = pen.kind == penalty_kind::l1 ? l1_rho1 : std::max(1.0, 2.0 * pen.rho_threshold());
}

namespace {

void check_inputs(const design_matrix& x, const Eigen::VectorXd& y, const penalty& pen,
                  const admm_options& options) {
  if (x.rows() == 0) fail("no samples to fit");
  if (x.cols() == 0) fail("no features to fit");
  if (y.size() != x.rows()) fail("{} labels for {} samples", y.size(), x.rows());
  for (int64_t i = 0; i < y.size(); ++i)
    if (y[i] != 1 && y[i] != -1) fail("label {} of sample {} is not -1 or +1", y[i], i + 1);
  pen.validate();
  if (options.rho1 < 0 || options.rho2 < 0)
    fail("--rho1 and --rho2 must be positive (got {}, {})", options.rho1, options.rho2);
  if (!(options.abs_tol >= 0) || !(options.rel_tol >= 0)) fail("--tol must not be negative");
  if (options.max_iter < 1) fail("--max-iter must be at least 1 (got {})", options.max_iter);
  if (!(options.relaxation >= 1 && options.relaxation < 2))
    fail("--relax must be in [1, 2) (got {})", options.relaxation);
  if (options.l1_weights.size() != 0) {
    if (pen.kind != penalty_kind::l1) fail("l1_weights need the l1 penalty");
    if (options.l1_weights.size() != x.cols())
      fail("{} l1_weights for {} features", options.l1_weights.size(), x.cols());
    if (!(options.l1_weights.array() >= 0).all()) fail("l1_weights must not be negative");
  }
}

// Screening (admm_options::screening): ADMM over a working set of columns,
// then the KKT conditions of the whole problem on the columns left out.
// At an optimum of the hinge split, rho2 u2 = -s/n with s the hinge
// subgradients, and the hinge term's gradient is g = rho2 X_c^T (y .* u2); a
// column j held at zero is optimal iff |g_j| <= lambda_j. The columns that
// violate it (by more than screen_slack) join the set and ADMM continues
// from where it stopped (their z = 0 and their u1 = -g/rho1 clipped to
// +-lambda_j/rho1: the w-step's optimality within the z-step's range).
//
// working_set holds the whole problem's state between rounds and the set;
// solve_screened runs the rounds.
class working_set {
 public:
  working_set(const design_matrix& x, const Eigen::VectorXd& y, const penalty& pen,
              const admm_options& options, const admm_state* start)
      : x_(x),
        y_(y),
        pen_(pen),
        options_(options),
        n_(x.rows()),
        p_(x.cols()),
        weighted_(options.l1_weights.size() != 0),
        xc_(x, x.col_sums() / double(n_), false),
        batch_(std::max<int64_t>(2 * n_, 64)),
        g_(p_),
        v_(n_),
        in_(size_t(p_), 0) {
    have_state_ = start && !start->empty();
    if (have_state_) full_ = *start;
    // Before any ADMM: from the start's duals, or at w = 0 where (with
    // |b| < 1) every margin is below 1 (s = 1, u2 = -1/(n rho2)).
    if (have_state_)
      gradient(full_.u2, full_.rho2);
    else
      gradient(Eigen::VectorXd::Constant(n_, -1.0 / double(n_)), 1.0);
    if (have_state_)
      for (int64_t j = 0; j < p_; ++j)
        if (full_.z[j] != 0) in_[size_t(j)] = 1, set_.push_back(j);
    add_top([](double) { return true; });
  }

  const std::vector<int64_t>& columns() const { return set_; }

  // The next round's ADMM options: the set's L1 weights, the iterations
  // left of the cap, no screening.
  admm_options round_options(int iterations_done) const {
    const int64_t k = int64_t(set_.size());
    admm_options round = options_;
    round.screening = false;
    round.max_iter = options_.max_iter - iterations_done;
    if (weighted_) {
      for (int64_t i = 0; i < k; ++i) round.l1_weights[i] = options_.l1_weights[set_[size_t(i)]];
      round.l1_weights.conservativeResize(k);
    }
    return round;
  }

  // The whole problem's state restricted to the set (empty before a state).
  admm_state round_start() const {
    admm_state start;
    if (!have_state_) return start;
    const int64_t k = int64_t(set_.size());
    start.z.resize(k), start.u1.resize(k);
    for (int64_t i = 0; i < k; ++i) {
      const int64_t j = set_[size_t(i)];
      start.z[i] = full_.z[j], start.u1[i] = full_.u1[j];
    }
    start.r = full_.r, start.u2 = full_.u2, start.rho1 = full_.rho1, start.rho2 = full_.rho2;
    return start;
  }

  // What the round's stopping rule adds for the columns left out; its check
  // sets `grow` and stops the run as soon as a left-out column violates its
  // condition (no iterations spent on a set that must grow anyway).
  detail::left_out round_left_out(int iterations_done, bool& grow) {
    detail::left_out out;
    out.cols = p_ - int64_t(set_.size());
    if (have_state_)
      for (int64_t j = 0; j < p_; ++j)
        if (!in_[size_t(j)]) out.dual_sq += std::pow(full_.rho1 * full_.u1[j], 2);
    out.check_every = screen_check_every;
    out.check = [this, &grow](const Eigen::VectorXd& u2, double rho2) {
      gradient(u2, rho2);
      for (int64_t j = 0; j < p_ && !grow; ++j)
        grow = !in_[size_t(j)] && score(j) > 1 + screen_slack;
      return grow;
    };
    out.iteration_offset = iterations_done;
    return out;
  }

  // Back to the whole problem after a round on the set: left-out columns
  // are zero, their scaled dual follows from the w-step's optimality
  // rho1 u1 + g = 0 (clipped to the range the z-step allows).
  void take_round(admm_result& round) {
    const int64_t k = int64_t(set_.size());
    full_.rho1 = round.state.rho1, full_.rho2 = round.state.rho2;
    full_.r = std::move(round.state.r), full_.u2 = std::move(round.state.u2);
    gradient(full_.u2, full_.rho2);
    full_.z = Eigen::VectorXd::Zero(p_);
    full_.u1.resize(p_);
    for (int64_t j = 0; j < p_; ++j) {
      const double c = limit(j) / full_.rho1;
      full_.u1[j] = std::clamp(-g_[j] / full_.rho1, -c, c);
    }
    for (int64_t i = 0; i < k; ++i)
      full_.z[set_[size_t(i)]] = round.state.z[i], full_.u1[set_[size_t(i)]] = round.state.u1[i];
    have_state_ = true;
  }

  // Adds the left-out columns that violate their condition (at most a
  // batch, largest |g_j| / lambda_j first); returns how many.
  size_t add_violators() {
    return add_top([](double score) { return score > 1 + screen_slack; });
  }

  admm_state& whole_state() { return full_; }

 private:
  double limit(int64_t j) const { return pen_.lambda * (weighted_ ? options_.l1_weights[j] : 1.0); }

  // g = rho2 X_c^T (y .* u2) from the hinge split's scaled dual.
  void gradient(const Eigen::VectorXd& u2, double rho2) {
    v_ = rho2 * y_.cwiseProduct(u2);
    xc_.transpose_times(v_, g_);
  }

  // |g_j| / lambda_j: above 1 (+ screen_slack), a zero column j violates.
  double score(int64_t j) const {
    const double lj = limit(j), a = std::abs(g_[j]);
    return lj > 0 ? a / lj : (a > 0 ? HUGE_VAL : 0.0);
  }

  // Adds the (at most a batch) left-out columns of largest |g_j| / lambda_j
  // that pass `admit`.
  template <class Admit>
  size_t add_top(const Admit& admit) {
    std::vector<std::pair<double, int64_t>> candidates;
    for (int64_t j = 0; j < p_; ++j)
      if (!in_[size_t(j)] && admit(score(j))) candidates.emplace_back(-score(j), j);
    const auto k = std::min<size_t>(candidates.size(), size_t(batch_));
    std::partial_sort(candidates.begin(), candidates.begin() + int64_t(k), candidates.end());
    for (size_t i = 0; i < k; ++i)
      in_[size_t(candidates[i].second)] = 1, set_.push_back(candidates[i].second);
    std::sort(set_.begin(), set_.end());
    return k;
  }

  const design_matrix& x_;
  const Eigen::VectorXd& y_;
  const penalty& pen_;
  const admm_options& options_;
  const int64_t n_, p_;
  const bool weighted_;
  const design_operator xc_;
  const int64_t batch_;  // columns added per round at most
  admm_state full_;      // the whole problem's state, kept between rounds
  bool have_state_ = false;
  Eigen::VectorXd g_;         // (p) the hinge term's gradient
  Eigen::VectorXd v_;         // (n) scratch
  std::vector<char> in_;      // (p) whether column j is in the set
  std::vector<int64_t> set_;  // the set's columns, ascending
};

admm_result solve_screened(const design_matrix& x, const Eigen::VectorXd& y, const penalty& pen,
                           const admm_options& options, const admm_monitor& monitor,
                           const admm_state* start) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t p = x.cols();
  working_set set(x, y, pen, options, start);
  admm_result result;
  int iterations = 0, rounds = 0, rho_changes = 0;
  int64_t cg = 0, last_k = 0;
  for (;;) {
    ++rounds;
    const int64_t k = int64_t(set.columns().size());
    const design_matrix sub = k == p ? design_matrix() : x.select_cols(set.columns());
    const admm_options round = set.round_options(iterations);
    const admm_state round_start = set.round_start();
    bool grow = false;
    const detail::left_out out = set.round_left_out(iterations, grow);
    result = detail::solve_all(k == p ? x : sub, y, pen, round, monitor,
                               round_start.empty() ? nullptr : &round_start, out);
    iterations += result.iterations, cg += result.cg_iterations;
    rho_changes += result.rho_changes;
    set.take_round(result);
    last_k = k;
    // Stopped inside the run (iteration cap, monitor): not converged.
    if ((!result.converged && !grow) || k == p) break;
    // The left-out columns are checked on the final state of every run, also
    // one that converged on its last allowed iteration: a violator means the
    // whole problem has not converged.
    const size_t added = set.add_violators();
    if (added > 0 && iterations >= options.max_iter) {
      result.converged = false;
      break;
    }
    // No violator left: done when the run converged; a run stopped by the
    // check found violators in this same state, so this is only a guard
    // (continue on the same set, budget permitting).
    if (added == 0 && (result.converged || iterations >= options.max_iter)) break;
  }
  result.iterations = iterations, result.cg_iterations = cg, result.rho_changes = rho_changes;
  result.screen_rounds = rounds;
  result.working_set = last_k;
  result.w = set.whole_state().z;
  result.state = std::move(set.whole_state());
  result.time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace

admm_result admm_solve(const design_matrix& x, const Eigen::VectorXd& y, const penalty& pen,
                       const admm_options& options, const admm_monitor& monitor,
                       const admm_state* start) {
  check_inputs(x, y, pen, options);
  const int64_t n = x.rows(), p = x.cols();
  if (start && !start->empty() &&
      (start->z.size() != p || start->u1.size() != p || start->r.size() != n ||
       start->u2.size() != n || !(start->rho1 > 0) || !(start->rho2 > 0)))
    fail("warm start of size ({}, {}) for data of {} samples x {} features", start->r.size(),
         start->z.size(), n, p);
  if (options.screening && pen.kind == penalty_kind::l1 && !options.l1_start &&
      double(p) >= options.screen_ratio * double(n) && p > 4 * std::max<int64_t>(2 * n, 64))
    return solve_screened(x, y, pen, options, monitor, start);
  admm_result result = detail::solve_all(x, y, pen, options, monitor, start);
  result.working_set = p;
  return result;
}

}  // namespace merak::svm
