#include "svm/consensus.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.hpp"
#include "svm/admm.hpp"
#include "svm/objective.hpp"

namespace merak::svm {

void worker_residuals::add(const worker_residuals& o) {
  primal_sq += o.primal_sq;
  r_change_sq += o.r_change_sq;
  local_norm_sq += o.local_norm_sq;
  aux_norm_sq += o.aux_norm_sq;
  dual_norm_sq += o.dual_norm_sq;
  rows += o.rows;
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

consensus_reducer::consensus_reducer(int64_t p, int workers, penalty pen, double rho1)
    : p_(p), k_(workers), pen_(pen), rho1_(rho1), zeta_(Eigen::VectorXd::Zero(p + 1)) {
  MERAK_CHECK(workers >= 1);
}

const Eigen::VectorXd& consensus_reducer::combine(const std::vector<Eigen::VectorXd>& contributions) {
  MERAK_CHECK(int(contributions.size()) == k_, "{} contributions for {} workers", contributions.size(), k_);
  v_ = Eigen::VectorXd::Zero(p_ + 1);
  for (const auto& c : contributions) {
    MERAK_CHECK(c.size() == p_ + 1);
    v_ += c;
  }
  v_ /= double(k_);
  Eigen::VectorXd prev = zeta_;
  pen_.prox(v_.head(p_), double(k_) * rho1_, z_);
  zeta_.head(p_) = z_;
  zeta_[p_] = v_[p_];
  change_ = (zeta_ - prev).norm();
  return zeta_;
}

consensus_result consensus_fit(const dataset& d, int workers, const penalty& pen,
                               const consensus_options& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t n = d.rows(), p = d.cols();
  if (workers < 1) fail("--workers must be at least 1 (got {})", workers);
  if (workers > n) fail("--workers {} exceeds the {} samples", workers, n);
  pen.validate();
  double rho1 = o.rho1, rho2 = o.rho2;
  {
    double d1, d2;
    default_rhos(n, p, pen, d1, d2);
    // The consensus prox runs at K rho1: dividing by K gives it the same
    // weight as the single-machine prox (and the same dynamics of z).
    if (rho1 == 0) rho1 = d1 / workers;
    if (rho2 == 0) rho2 = d2;
  }
  std::vector<consensus_worker> ws;
  ws.reserve(size_t(workers));
  for (int k = 0; k < workers; ++k) {
    std::vector<int64_t> rows;
    for (int64_t i = n * k / workers; i < n * (k + 1) / workers; ++i) rows.push_back(i);
    ws.emplace_back(d.select_rows(rows), n, rho1, rho2, o.method, o.dense_limit);
  }
  bool l1_phase = o.l1_start && pen.kind != penalty_kind::l1;
  int phase_start = 0;
  consensus_reducer red(p, workers, l1_phase ? penalty{penalty_kind::l1, pen.lambda, 0} : pen, rho1);
  std::vector<Eigen::VectorXd> sent(static_cast<size_t>(workers));
  consensus_result res;
  rho_control control(o.rho_control, pen.rho_threshold());
  const double sqrt_dim = std::sqrt(double(workers) * double(p + 1) + double(n));
  int it;
  for (it = 1; it <= o.max_iter; ++it) {
    for (int k = 0; k < workers; ++k) sent[size_t(k)] = ws[size_t(k)].local_step(red.zeta());
    const Eigen::VectorXd& zeta = red.combine(sent);
    worker_residuals sum;
    for (auto& w : ws) sum.add(w.dual_step(zeta));
    const double pri = std::sqrt(sum.primal_sq);
    const double dual = std::sqrt(double(workers) * rho1 * rho1 * red.change_norm() * red.change_norm() +
                                  rho2 * rho2 * sum.r_change_sq);
    const double eps_pri = sqrt_dim * o.abs_tol +
        o.rel_tol * std::max({std::sqrt(sum.local_norm_sq),
                              std::sqrt(double(workers) * zeta.squaredNorm() + sum.aux_norm_sq),
                              std::sqrt(double(n))});
    const double eps_dual = sqrt_dim * o.abs_tol + o.rel_tol * std::sqrt(sum.dual_norm_sq);
    res.primal_residual = pri, res.dual_residual = dual;
    if (pri <= eps_pri && dual <= eps_dual) {
      if (!l1_phase) {
        res.converged = true;
        break;
      }
      l1_phase = false;
      phase_start = it;
      red.set_penalty(pen);
      control = rho_control(o.rho_control, pen.rho_threshold());
      continue;
    }
    if (const double f = control.factor(it - phase_start, pri, dual, rho1); f != 1) {
      rho1 *= f, rho2 *= f;
      red.scale_rho(f);
      for (auto& w : ws) w.scale_rho(f);
    }
  }
  res.rho1 = rho1, res.rho2 = rho2;
  res.iterations = std::min(it, o.max_iter);
  res.w = red.zeta().head(p);
  res.b = red.zeta()[p];
  if (o.polish_bias) {
    Eigen::VectorXd xw;
    d.x.times(res.w, xw);
    res.b = best_bias(d.y, xw, res.b);
  }
  res.objective = objective(d.x, d.y, res.w, res.b, pen);
  res.time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace merak::svm
