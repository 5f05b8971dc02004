// The two-block ADMM over every column (svm/admm_columns.hpp).
#include "svm/admm_columns.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <utility>

#include "svm/objective.hpp"

namespace merak::svm::detail {
namespace {

// The sums of the stopping rule over the rows, and of the next t.
struct row_sums {
  double rm = 0, dr = 0, m = 0, r = 0, u2 = 0, t = 0;
};

// One pass over the rows of dense X (row-major) that ends an iteration's
// second block for the hinge split and begins the next iteration's first:
// per row, m = y (X_c w + tbar) (x_c^T w = x^T w - c0), its over-relaxed
// copy, the r-step, the u2 update, the stopping rule's sums, the next
// t = y (1 - r - u2) and X^T t, accumulated while the row is still in L1.
// It replaces two passes over X (X w, then X^T t next iteration) by one:
// on small dense data the two products were ~80% of an iteration and bound
// by the cache's bandwidth (sonar, 208 x 60). xt gets X_c^T t.
row_sums fused_row_pass(const dense_matrix& x, const Eigen::VectorXd& xbar,
                        const Eigen::VectorXd& w, double c0, double tbar, const Eigen::VectorXd& y,
                        double alpha, double tau, Eigen::VectorXd& r, Eigen::VectorXd& u2,
                        Eigen::VectorXd& xt) {
  const int64_t n = x.rows(), p = x.cols();
  row_sums s;
  double* rp = r.data();
  double* up = u2.data();
  const double* yp = y.data();
  // Rows [i, i + k): xw holds their x^T w; on return it holds their t.
  const auto rows = [&](int64_t i, int64_t k, double* xw) {
    double s_rm = 0, s_dr = 0, s_m = 0, s_r = 0, s_u2 = 0, s_t = 0;
#pragma omp simd reduction(+ : s_rm, s_dr, s_m, s_r, s_u2, s_t)
    for (int64_t l = 0; l < k; ++l) {
      const double mi = yp[i + l] * (xw[l] - c0 + tbar), ri = rp[i + l];
      const double mh = alpha * mi + (1 - alpha) * (1 - ri);
      const double v = 1 - mh - up[i + l];
      const double rn = v > tau ? v - tau : (v < 0 ? v : 0.0);
      const double e = rn + mi - 1, d = rn - ri, un = up[i + l] + rn + mh - 1;
      s_rm += e * e, s_dr += d * d, s_m += mi * mi, s_r += rn * rn, s_u2 += un * un;
      rp[i + l] = rn, up[i + l] = un;
      xw[l] = yp[i + l] * (1 - rn - un);
      s_t += xw[l];
    }
    s.rm += s_rm, s.dr += s_dr, s.m += s_m, s.r += s_r, s.u2 += s_u2, s.t += s_t;
  };
  xt.setZero(p);
  double* g = xt.data();
  const double* wp = w.data();
  int64_t i = 0;
  // Eight rows at a time: eight independent sums hide the latency of the
  // multiply-adds, and w and X^T t are loaded once per eight rows.
  for (; i + 8 <= n; i += 8) {
    const double* a = x.data() + i * p;
    const double *a0 = a, *a1 = a0 + p, *a2 = a1 + p, *a3 = a2 + p, *a4 = a3 + p, *a5 = a4 + p,
                 *a6 = a5 + p, *a7 = a6 + p;
    double d0 = 0, d1 = 0, d2 = 0, d3 = 0, d4 = 0, d5 = 0, d6 = 0, d7 = 0;
#pragma omp simd reduction(+ : d0, d1, d2, d3, d4, d5, d6, d7)
    for (int64_t j = 0; j < p; ++j) {
      const double wj = wp[j];
      d0 += a0[j] * wj, d1 += a1[j] * wj, d2 += a2[j] * wj, d3 += a3[j] * wj;
      d4 += a4[j] * wj, d5 += a5[j] * wj, d6 += a6[j] * wj, d7 += a7[j] * wj;
    }
    double t[8] = {d0, d1, d2, d3, d4, d5, d6, d7};
    rows(i, 8, t);
#pragma omp simd
    for (int64_t j = 0; j < p; ++j)
      g[j] += ((a0[j] * t[0] + a1[j] * t[1]) + (a2[j] * t[2] + a3[j] * t[3])) +
              ((a4[j] * t[4] + a5[j] * t[5]) + (a6[j] * t[6] + a7[j] * t[7]));
  }
  for (; i < n; ++i) {
    const double* a = x.data() + i * p;
    double d = 0;
#pragma omp simd reduction(+ : d)
    for (int64_t j = 0; j < p; ++j) d += a[j] * wp[j];
    rows(i, 1, &d);
#pragma omp simd
    for (int64_t j = 0; j < p; ++j) g[j] += a[j] * d;
  }
  xt -= s.t * xbar;  // X_c^T t = X^T t - xbar sum(t)
  return s;
}

// The sums over the p columns of the stopping rule, from the second block.
struct column_sums {
  double wz = 0, dz = 0, u1 = 0, w = 0, z = 0, nz = 0;
};

// The starting rhos: options' when set, else default_rhos (warm: the
// start's, rho1 kept above the prox threshold).
void initial_rhos(int64_t n, int64_t p, const penalty& pen, const admm_options& options,
                  const admm_state* start, double& rho1, double& rho2) {
  const bool warm = start && !start->empty();
  rho1 = options.rho1, rho2 = options.rho2;
  double default_rho1, default_rho2;
  default_rhos(n, p, pen, default_rho1, default_rho2);
  if (warm)
    default_rho1 = std::max(start->rho1, pen.rho_threshold() * 1.0001), default_rho2 = start->rho2;
  if (rho1 == 0) rho1 = default_rho1;
  if (rho2 == 0) rho2 = default_rho2;
}

// ADMM over every column of x: the state of one run and its steps. An
// iteration is the first block (w, b; with the fused pass also the rows'
// r, u2 and the next t), the second block (z, u1) and the stopping test
// with rho control. Vectors: (p) for w, z, u1 and the column products,
// (n) for r, u2, t and the row products.
class column_admm {
 public:
  column_admm(const design_matrix& x, const Eigen::VectorXd& y, const penalty& pen,
              const admm_options& options, const admm_state* start, const left_out& out)
      : x_(x),
        y_(y),
        pen_(pen),
        options_(options),
        out_(out),
        n_(x.rows()),
        p_(x.cols()),
        xbar_(x.col_sums() / double(n_)),
        xc_(x, xbar_, false),
        control_(options.rho_control, pen.rho_threshold()),
        l1_pen_{penalty_kind::l1, pen.lambda, 0} {
    initial_rhos(n_, p_, pen, options, start, rho1_, rho2_);
    solver_ = make_w_solver(xc_, options.method, rho1_, rho2_, options.dense_limit, options.cg);
    start_from(start);
    alpha_ = options.relaxation;
    // Woodbury on dense data: keep X_c z (z is sparse: O(n nnz(z)) per
    // iteration) and X_c u1 (updated from X_c w) so that the w-step needs
    // one dense product (with X_c^T) instead of two: on wide dense data
    // those products dominate an iteration.
    track_ = options.track_products && solver_->method() == w_method::woodbury && !x.is_sparse();
    mz_.resize(n_), mz_prev_.resize(n_), mu1_.resize(n_), mq_.resize(n_);
    // Dense data without Woodbury's tracked products: one fused pass over
    // the rows per iteration (fused_row_pass).
    fused_ = options.fuse_rows && !x.is_sparse() && !track_;
    xtt_.resize(p_);
    if (fused_) start_t();
    if (track_) sparse_times(z_, mz_, -1);
    weighted_ = options.l1_weights.size() != 0;
    if (!(weighted_ && !options.l1_start)) unit_weights_ = Eigen::VectorXd::Ones(p_);
    sqrt_dim_ = std::sqrt(double(n_ + p_ + out.cols));
    // Nonconvex penalties start from the L1 fit with the same lambda (phase
    // 1), then continue from that state with their own prox (phase 2).
    l1_phase_ = options.l1_start && pen.kind != penalty_kind::l1;
  }
  column_admm(const column_admm&) = delete;
  column_admm& operator=(const column_admm&) = delete;

  // Iterates until the stopping rule holds, the monitor or the left-out
  // columns' check stops it, or the iteration cap; then the result (no time).
  admm_result run(const admm_monitor& monitor) {
    int iteration = 0;
    for (iteration = 1; iteration <= options_.max_iter; ++iteration) {
      const penalty& active = l1_phase_ ? l1_pen_ : pen_;
      const double tol_hint =
          iteration == 1 ? 1.0 : 0.1 * result_.primal_residual / std::sqrt(double(n_));
      if (fused_)
        fused_first_block(tol_hint);
      else
        first_block(iteration, tol_hint);
      const column_sums columns = second_block(active);
      if (ends_run(iteration, columns, monitor)) break;
    }
    return finish(std::min(iteration, options_.max_iter));
  }

 private:
  void start_from(const admm_state* start) {
    w_ = Eigen::VectorXd::Zero(p_), z_ = w_, u1_ = w_, z_prev_.resize(p_);
    r_ = Eigen::VectorXd::Ones(n_), u2_ = Eigen::VectorXd::Zero(n_), r_prev_.resize(n_);
    t_.resize(n_), q_.resize(p_), xw_.resize(n_), m_.resize(n_), v_.resize(n_);
    w_hat_.resize(p_), m_hat_.resize(n_);
    if (start && !start->empty()) {
      // The scaled duals u = y / rho follow the rhos actually used.
      z_ = start->z, u1_ = start->u1 * (start->rho1 / rho1_);
      r_ = start->r, u2_ = start->u2 * (start->rho2 / rho2_);
    }
  }

  // The fused pass's t = y (1 - r - u2), its sum and X_c^T t, for the next
  // w-step (t depends on u2).
  void start_t() {
    t_ = y_.array() * (1.0 - r_.array() - u2_.array());
    tsum_ = t_.sum();
    xc_.transpose_times(t_, xtt_);
  }

  // out = X_c zz, by columns when zz is sparse. nz_known: zz's non-zero
  // count when the caller has it (else -1).
  void sparse_times(const Eigen::VectorXd& zz, Eigen::VectorXd& out, int64_t nz_known) {
    const int64_t nz = nz_known >= 0 ? nz_known : (zz.array() != 0).count();
    if (nz * 8 > p_) {
      xc_.times(zz, out);
      return;
    }
    out.setZero();
    const auto& xd = x_.dense();
    for (int64_t j = 0; j < p_; ++j)
      if (zz[j] != 0) out += zz[j] * xd.col(j);
    out.array() -= xbar_.dot(zz);
  }

  // w, b, then the rows (r, u2 and the next t) in one pass.
  void fused_first_block(double tol_hint) {
    const double tbar = tsum_ / double(n_);
    q_ = z_ - u1_;
    solver_->solve_given_mt(q_, xtt_, w_, tol_hint);
    const double c0 = xbar_.dot(w_);
    b_ = tbar - c0;
    z_prev_.swap(z_);
    if (alpha_ != 1) w_hat_ = alpha_ * w_ + (1 - alpha_) * z_prev_;
    rows_ = fused_row_pass(x_.dense(), xbar_, w_, c0, tbar, y_, alpha_, 1.0 / (double(n_) * rho2_),
                           r_, u2_, xtt_);
    tsum_ = rows_.t;
  }

  // w, b (the first block), then r, u2 (the rows' part of the second).
  void first_block(int iteration, double tol_hint) {
    t_ = y_.array() * (1.0 - r_.array() - u2_.array());
    const double tbar = t_.mean();
    t_.array() -= tbar;
    q_ = z_ - u1_;
    // w = (rho1 I + rho2 X_c^T X_c)^-1 (rho1 q + rho2 X_c^T t), xw = X_c w.
    // Inexact for CG: a tenth of the last relative primal residual.
    if (track_) {
      if ((iteration - 1) % 100 == 0) xc_.times(u1_, mu1_);  // bound the drift of the updates
      mq_ = mz_ - mu1_;
      solver_->solve_split_given(q_, mq_, t_, w_, xw_);
    } else {
      solver_->solve_split(q_, t_, w_, xw_, tol_hint);
    }
    b_ = tbar - xbar_.dot(w_);
    m_ = y_.array() * (xw_.array() + tbar);  // X w + b = X_c w + tbar
    // r, z: the second block (separable).
    r_prev_.swap(r_);
    z_prev_.swap(z_);
    // Over-relaxed copies of the first block's output (alpha = 1: w, m).
    if (alpha_ != 1) {
      w_hat_ = alpha_ * w_ + (1 - alpha_) * z_prev_;
      m_hat_ = alpha_ * m_.array() + (1 - alpha_) * (1.0 - r_prev_.array());
    }
    const Eigen::VectorXd& mh = alpha_ != 1 ? m_hat_ : m_;
    v_ = 1.0 - mh.array() - u2_.array();
    hinge_prox(v_, 1.0 / (double(n_) * rho2_), r_);
    u2_.array() += r_.array() + mh.array() - 1.0;
    rows_.rm = (r_.array() + m_.array() - 1.0).matrix().squaredNorm();
    rows_.dr = (r_ - r_prev_).squaredNorm(), rows_.m = m_.squaredNorm(), rows_.r = r_.squaredNorm();
    rows_.u2 = u2_.squaredNorm();
  }

  // z = prox(wh + u1) and u1 += wh - z, with the columns' sums of the
  // stopping rule.
  column_sums second_block(const penalty& active) {
    const Eigen::VectorXd& wh = alpha_ != 1 ? w_hat_ : w_;
    column_sums sums;
    const bool soft_block = (weighted_ && !l1_phase_) || active.kind == penalty_kind::l1;
    if (soft_block)
      sums = soft_threshold_block(wh);
    else
      active.prox(wh + u1_, rho1_, z_);
    if (track_) {
      // X_c u1 follows u1 += wh - z: X_c wh = alpha xw + (1 - alpha) X_c z_prev.
      mz_prev_.swap(mz_);
      sparse_times(z_, mz_, soft_block ? int64_t(sums.nz) : -1);
      mu1_ += (alpha_ != 1 ? (alpha_ * xw_ + (1 - alpha_) * mz_prev_).eval() : xw_) - mz_;
    }
    // Scaled duals.
    if (!soft_block) {
      u1_ += wh - z_;
      sums.wz = (w_ - z_).squaredNorm(), sums.dz = (z_ - z_prev_).squaredNorm();
      sums.u1 = u1_.squaredNorm(), sums.w = w_.squaredNorm(), sums.z = z_.squaredNorm();
    }
    return sums;
  }

  // The L1 / weighted-L1 second block in one vectorised pass: z = soft(wh +
  // u1), u1 += wh - z and the p-length sums of the stopping rule (one read
  // of the p-length vectors instead of one per quantity). Plain L1 runs the
  // weighted loop with unit weights: no branch on a null weight pointer
  // inside the loop, which would keep it from vectorising as well.
  column_sums soft_threshold_block(const Eigen::VectorXd& wh) {
    double s_wz = 0, s_dz = 0, s_u1 = 0, s_w = 0, s_z = 0, s_nz = 0;
    const double tau = pen_.lambda / rho1_;
    const double* wt = weighted_ && !l1_phase_ ? options_.l1_weights.data() : unit_weights_.data();
    double* zp = z_.data();
    double* up = u1_.data();
    const double* whp = wh.data();
    const double* wp = w_.data();
    const double* zq = z_prev_.data();
    const int64_t p = p_;
#pragma omp simd reduction(+ : s_wz, s_dz, s_u1, s_w, s_z, s_nz)
    for (int64_t j = 0; j < p; ++j) {
      const double vj = whp[j] + up[j];
      const double a = std::abs(vj) - tau * wt[j];
      const double zj = a > 0 ? std::copysign(a, vj) : 0.0;
      const double uj = vj - zj, e = wp[j] - zj, d = zj - zq[j];
      zp[j] = zj;
      up[j] = uj;
      s_wz += e * e, s_dz += d * d, s_u1 += uj * uj;
      s_w += wp[j] * wp[j], s_z += zj * zj, s_nz += zj != 0 ? 1.0 : 0.0;
    }
    return {s_wz, s_dz, s_u1, s_w, s_z, s_nz};
  }

  // The stopping test after an iteration: true ends the run (converged,
  // stopped by the monitor, or the working set must grow). Otherwise ends
  // the L1 phase when it converged, or lets rho control rescale.
  bool ends_run(int iteration, const column_sums& columns, const admm_monitor& monitor) {
    const double pri = std::sqrt(columns.wz + rows_.rm);
    const double dual = std::sqrt(rho1_ * rho1_ * columns.dz + rho2_ * rho2_ * rows_.dr);
    const double eps_pri =
        sqrt_dim_ * options_.abs_tol +
        options_.rel_tol * std::max({std::sqrt(columns.w + rows_.m), std::sqrt(columns.z + rows_.r),
                                     std::sqrt(double(n_))});
    const double eps_dual = sqrt_dim_ * options_.abs_tol +
                            options_.rel_tol * std::sqrt(rho1_ * rho1_ * columns.u1 + out_.dual_sq +
                                                         rho2_ * rho2_ * rows_.u2);
    result_.primal_residual = pri, result_.dual_residual = dual;
    if (monitor && !monitor(out_.iteration_offset + iteration, pri, dual)) return true;
    if (out_.check && iteration % out_.check_every == 0 && out_.check(u2_, rho2_)) return true;
    if (pri <= eps_pri && dual <= eps_dual) {
      if (!l1_phase_) {
        result_.converged = true;
        return true;
      }
      l1_phase_ = false;
      phase_start_ = iteration;
      control_ = rho_control(options_.rho_control, pen_.rho_threshold());
      return false;
    }
    if (const double f = control_.factor(iteration - phase_start_, pri, dual, rho1_); f != 1) {
      rho1_ *= f, rho2_ *= f;
      u1_ /= f, u2_ /= f;  // scaled duals: u = y / rho
      if (track_) mu1_ /= f;
      solver_->set_rho(rho1_, rho2_);
      if (fused_) start_t();  // t depends on u2
    }
    return false;
  }

  // The result after `iterations`: w = z, the state to continue from, the
  // polished bias and the objective.
  admm_result finish(int iterations) {
    admm_result& result = result_;
    result.iterations = iterations;
    result.rho1 = rho1_, result.rho2 = rho2_;
    result.rho_changes = control_.changes();
    result.method = solver_->method();
    result.cg_iterations = solver_->inner_iterations();
    result.state.z = z_, result.state.u1 = std::move(u1_), result.state.r = std::move(r_);
    result.state.u2 = std::move(u2_), result.state.rho1 = rho1_, result.state.rho2 = rho2_;
    result.w = std::move(z_);
    result.b = b_;
    if (options_.polish_bias) {
      x_.times(result.w, xw_);
      result.b = best_bias(y_, xw_, b_);
    }
    result.objective =
        weighted_ ? weighted_objective(x_, y_, result.w, result.b, pen_.lambda, options_.l1_weights)
                  : objective(x_, y_, result.w, result.b, pen_);
    return std::move(result);
  }

  const design_matrix& x_;
  const Eigen::VectorXd& y_;
  const penalty& pen_;
  const admm_options& options_;
  const left_out& out_;
  const int64_t n_, p_;
  const Eigen::VectorXd xbar_;  // (p) column means
  const design_operator xc_;    // X_c = X - 1 xbar^T
  double rho1_ = 0, rho2_ = 0;
  std::unique_ptr<w_solver> solver_;
  Eigen::VectorXd w_, z_, u1_, z_prev_, q_, w_hat_;           // (p)
  Eigen::VectorXd r_, u2_, r_prev_, t_, xw_, m_, v_, m_hat_;  // (n)
  double alpha_ = 1;
  bool track_ = false;
  Eigen::VectorXd mz_, mz_prev_, mu1_, mq_;  // (n) X_c z, X_c u1 and X_c q when tracked
  bool fused_ = false;
  Eigen::VectorXd xtt_;  // (p) X_c^T t for the next w-step (fused)
  double tsum_ = 0;      // sum(t) (fused)
  bool weighted_ = false;
  Eigen::VectorXd unit_weights_;  // (p) ones, for the soft block of plain L1
  double b_ = 0;
  double sqrt_dim_ = 0;  // sqrt(n + p + left-out columns), the absolute tolerance's scale
  row_sums rows_;        // the rows' sums of the stopping rule, from the first block
  rho_control control_;
  bool l1_phase_ = false;
  const penalty l1_pen_;
  int phase_start_ = 0;
  admm_result result_;
};

}  // namespace

admm_result solve_all(const design_matrix& x, const Eigen::VectorXd& y, const penalty& pen,
                      const admm_options& options, const admm_monitor& monitor,
                      const admm_state* start, const left_out& out) {
  const auto t0 = std::chrono::steady_clock::now();
  column_admm admm(x, y, pen, options, start, out);
  admm_result result = admm.run(monitor);
  result.time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace merak::svm::detail
