#include "svm/consensus.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.hpp"
#include "svm/admm.hpp"
#include "svm/objective.hpp"

namespace merak::svm {

void worker_residuals::add(const worker_residuals& other) {
  primal_sq += other.primal_sq;
  r_change_sq += other.r_change_sq;
  local_norm_sq += other.local_norm_sq;
  aux_norm_sq += other.aux_norm_sq;
  dual_norm_sq += other.dual_norm_sq;
  rows += other.rows;
}

consensus_worker::consensus_worker(dataset shard, int64_t n_total, double rho1, double rho2,
                                   w_method method, int64_t dense_limit)
    : shard_(std::move(shard)), p_(shard_.cols()), n_total_(n_total), rho1_(rho1), rho2_(rho2) {
  MERAK_CHECK(shard_.rows() > 0 && n_total_ >= shard_.rows());
  a_ = std::make_unique<design_operator>(shard_.x, Eigen::VectorXd(), true);
  solver_ = make_w_solver(*a_, method, rho1, rho2, dense_limit);
  const int64_t nk = shard_.rows();
  theta_ = Eigen::VectorXd::Zero(p_ + 1);
  u1_ = theta_;
  r_ = Eigen::VectorXd::Ones(nk);
  u2_ = Eigen::VectorXd::Zero(nk);
}

const Eigen::VectorXd& consensus_worker::local_step(const Eigen::VectorXd& zeta) {
  MERAK_CHECK(zeta.size() == p_ + 1);
  const auto& y = shard_.y;
  // A^T v = [X 1]^T (Y v) and A^T A = [X 1]^T [X 1] (Y^2 = I): solve with
  // M = [X 1], a = zeta - U1, t = Y (1 - r - U2); keep M theta for m_k.
  tmp_ = y.array() * (1.0 - r_.array() - u2_.array());
  q_ = zeta - u1_;
  theta_start_ = theta_;
  solver_->solve_split(q_, tmp_, theta_, mtheta_);
  send_ = theta_ + u1_;
  return send_;
}

worker_residuals consensus_worker::dual_step(const Eigen::VectorXd& zeta) {
  const auto& y = shard_.y;
  m_ = y.cwiseProduct(mtheta_);
  worker_residuals res;
  tmp_ = 1.0 - m_.array() - u2_.array();
  Eigen::VectorXd r_prev = r_;
  hinge_prox(tmp_, 1.0 / (double(n_total_) * rho2_), r_);
  u1_ += theta_ - zeta;
  tmp_ = r_.array() + m_.array() - 1.0;
  u2_ += tmp_;
  res.primal_sq = (theta_ - zeta).squaredNorm() + tmp_.squaredNorm();
  res.r_change_sq = (r_ - r_prev).squaredNorm();
  res.local_norm_sq = theta_.squaredNorm() + m_.squaredNorm();
  res.aux_norm_sq = r_.squaredNorm();
  res.dual_norm_sq = rho1_ * rho1_ * u1_.squaredNorm() + rho2_ * rho2_ * u2_.squaredNorm();
  res.rows = shard_.rows();
  return res;
}

void consensus_worker::scale_rho(double f) {
  rho1_ *= f, rho2_ *= f;
  u1_ /= f, u2_ /= f;
  solver_->set_rho(rho1_, rho2_);
}

consensus_reducer::consensus_reducer(int64_t p, int64_t n_total, int workers, penalty pen,
                                     double rho1, double rho2, const consensus_options& options)
    : p_(p),
      n_(n_total),
      k_(workers),
      pen_(pen),
      active_(pen),
      rho1_(rho1),
      rho2_(rho2),
      o_(options),
      control_(options.rho_control, pen.rho_threshold()),
      l1_phase_(options.l1_start && pen.kind != penalty_kind::l1),
      zeta_(Eigen::VectorXd::Zero(p + 1)) {
  MERAK_CHECK(workers >= 1);
  if (l1_phase_) active_ = penalty{penalty_kind::l1, pen.lambda, 0};
}

void consensus_reducer::set_l1_weights(const Eigen::VectorXd& weights) {
  MERAK_CHECK(pen_.kind == penalty_kind::l1 && !l1_phase_, "L1 weights need the l1 penalty");
  MERAK_CHECK(weights.size() == p_, "{} L1 weights for {} features", weights.size(), p_);
  weights_ = weights;
}

consensus_reducer::consensus_reducer(int64_t p, int64_t n_total, int workers, penalty pen,
                                     const consensus_carry& from, const consensus_options& options)
    : consensus_reducer(p, n_total, workers, pen, from.rho1, from.rho2, options) {
  if (from.zeta.size() == 0) return;
  MERAK_CHECK(from.zeta.size() == p_ + 1, "a start zeta of size {} for p + 1 = {}",
              from.zeta.size(), p_ + 1);
  zeta_ = from.zeta;
}

const Eigen::VectorXd& consensus_reducer::combine(
    const std::vector<Eigen::VectorXd>& contributions) {
  MERAK_CHECK(int(contributions.size()) == k_, "{} contributions for {} workers",
              contributions.size(), k_);
  v_ = Eigen::VectorXd::Zero(p_ + 1);
  for (const auto& c : contributions) {
    MERAK_CHECK(c.size() == p_ + 1, "a contribution of size {} for p + 1 = {}", c.size(), p_ + 1);
    v_ += c;
  }
  v_ /= double(k_);
  Eigen::VectorXd prev = zeta_;
  if (weights_.size()) {
    // Weighted soft threshold at lambda w_j / (K rho1).
    const double tau = pen_.lambda / (double(k_) * rho1_);
    z_ = v_.head(p_);
    for (int64_t j = 0; j < p_; ++j) {
      const double a = std::abs(z_[j]) - tau * weights_[j];
      z_[j] = a > 0 ? std::copysign(a, z_[j]) : 0.0;
    }
  } else {
    active_.prox(v_.head(p_), double(k_) * rho1_, z_);
  }
  zeta_.head(p_) = z_;
  zeta_[p_] = v_[p_];
  change_ = (zeta_ - prev).norm();
  return zeta_;
}

consensus_decision consensus_reducer::finish(const worker_residuals& sum) {
  ++it_;
  consensus_decision d;
  const double K = double(k_);
  const double sqrt_dim = std::sqrt(K * double(p_ + 1) + double(n_));
  d.primal = std::sqrt(sum.primal_sq);
  d.dual = std::sqrt(K * rho1_ * rho1_ * change_ * change_ + rho2_ * rho2_ * sum.r_change_sq);
  const double eps_pri =
      sqrt_dim * o_.abs_tol +
      o_.rel_tol *
          std::max({std::sqrt(sum.local_norm_sq),
                    std::sqrt(K * zeta_.squaredNorm() + sum.aux_norm_sq), std::sqrt(double(n_))});
  const double eps_dual = sqrt_dim * o_.abs_tol + o_.rel_tol * std::sqrt(sum.dual_norm_sq);
  if (d.primal <= eps_pri && d.dual <= eps_dual) {
    if (!l1_phase_) {
      d.stop = d.converged = true;
      return d;
    }
    l1_phase_ = false;
    active_ = pen_;
    phase_start_ = it_;
    control_ = rho_control(o_.rho_control, pen_.rho_threshold());
    d.stop = it_ >= o_.max_iter;
    return d;
  }
  d.stop = it_ >= o_.max_iter;
  // No rho change on the last iteration: a driver stops before telling the
  // workers, and a warm start from this reducer's rhos would then run with
  // workers whose rhos differ (a rescaled penalty).
  if (d.stop) return d;
  if (const double f = control_.factor(it_ - phase_start_, d.primal, d.dual, rho1_); f != 1) {
    rho1_ *= f, rho2_ *= f;
    d.rho_factor = f;
  }
  return d;
}

consensus_setup plan_consensus(const dataset& d, int workers, const penalty& pen,
                               const consensus_options& options) {
  const int64_t n = d.rows(), p = d.cols();
  if (workers < 1) fail("--workers must be at least 1 (got {})", workers);
  if (workers > n) fail("--workers {} exceeds the {} samples", workers, n);
  pen.validate();
  if (options.max_iter < 1) fail("--max-iter must be at least 1 (got {})", options.max_iter);
  consensus_setup s;
  consensus_rhos(n, p, workers, pen, options, s.rho1, s.rho2);
  for (int k = 0; k < workers; ++k) s.rows.push_back(consensus_shard_rows(n, workers, k));
  return s;
}

std::vector<int64_t> consensus_shard_rows(int64_t n, int workers, int k) {
  MERAK_CHECK(workers >= 1 && k >= 0 && k < workers);
  std::vector<int64_t> rows;
  for (int64_t i = n * k / workers; i < n * (k + 1) / workers; ++i) rows.push_back(i);
  return rows;
}

void consensus_rhos(int64_t n, int64_t p, int workers, const penalty& pen,
                    const consensus_options& options, double& rho1, double& rho2) {
  double d1, d2;
  const bool lla = uses_lla(pen, options.nonconvex, n, p);
  default_rhos(n, p, lla ? penalty{penalty_kind::l1, pen.lambda, 0} : pen, d1, d2);
  // The consensus prox runs at K rho1: dividing by K gives it the same
  // weight as the single-machine prox (and the same dynamics of z).
  rho1 = options.rho1 != 0 ? options.rho1 : d1 / workers;
  rho2 = options.rho2 != 0 ? options.rho2 : d2;
}

void finish_consensus_result(const dataset& d, const penalty& pen, const consensus_options& options,
                             const consensus_reducer& red, consensus_result& res) {
  const int64_t p = d.cols();
  res.rho1 = red.rho1(), res.rho2 = red.rho2();
  res.w = red.zeta().head(p);
  res.b = red.zeta()[p];
  if (options.polish_bias) {
    Eigen::VectorXd xw;
    d.x.times(res.w, xw);
    res.b = best_bias(d.y, xw, res.b);
  }
  res.objective = objective(d.x, d.y, res.w, res.b, pen);
}

consensus_result consensus_solve(int64_t n, int64_t p, const penalty& pen,
                                 const consensus_options& options, consensus_carry& carry,
                                 const consensus_run& run) {
  if (!uses_lla(pen, options.nonconvex, n, p)) {
    consensus_result r;
    run(pen, nullptr, carry, r);
    return r;
  }
  if (options.lla.max_steps < 0)
    fail("lla max_steps must not be negative (got {})", options.lla.max_steps);
  const penalty l1{penalty_kind::l1, pen.lambda, 0};
  int iterations = 0;
  const auto step = [&](const Eigen::VectorXd* weights) {
    consensus_result r;
    run(l1, weights, carry, r);
    iterations += r.iterations;
    return r;
  };
  // The workers keep their state (and rho) from run to run, so the second
  // chain of lla_start::best continues from where the first ended.
  const auto restart = [] {};
  bool settled = false;
  consensus_result cur = lla_loop<consensus_result>(pen, options.lla, p, step, restart, settled);
  cur.iterations = iterations;
  cur.converged = cur.converged && settled;
  return cur;
}

consensus_result consensus_fit(const dataset& d, int workers, const penalty& pen,
                               const consensus_options& options) {
  const auto t0 = std::chrono::steady_clock::now();
  const consensus_setup s = plan_consensus(d, workers, pen, options);
  std::vector<consensus_worker> ws;
  ws.reserve(s.rows.size());
  for (const auto& rows : s.rows)
    ws.emplace_back(d.select_rows(rows), d.rows(), s.rho1, s.rho2, options.method,
                    options.dense_limit);
  std::vector<Eigen::VectorXd> sent(ws.size());
  const consensus_run run = [&](const penalty& rpen, const Eigen::VectorXd* weights,
                                consensus_carry& carry, consensus_result& res) {
    consensus_reducer red(d.cols(), d.rows(), workers, rpen, carry, options);
    if (weights) red.set_l1_weights(*weights);
    for (;;) {
      for (size_t k = 0; k < ws.size(); ++k) sent[k] = ws[k].local_step(red.zeta());
      const Eigen::VectorXd& zeta = red.combine(sent);
      worker_residuals sum;
      for (auto& w : ws) sum.add(w.dual_step(zeta));
      const consensus_decision dec = red.finish(sum);
      res.primal_residual = dec.primal, res.dual_residual = dec.dual;
      if (dec.rho_factor != 1)
        for (auto& w : ws) w.scale_rho(dec.rho_factor);
      if (dec.stop) {
        res.converged = dec.converged;
        break;
      }
    }
    res.iterations = red.iteration();
    finish_consensus_result(d, pen, options, red, res);
    carry = red.carry();
  };
  consensus_carry carry{{}, s.rho1, s.rho2};
  consensus_result res = consensus_solve(d.rows(), d.cols(), pen, options, carry, run);
  res.time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace merak::svm
