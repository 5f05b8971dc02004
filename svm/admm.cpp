#include "svm/admm.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "svm/objective.hpp"

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
                  const admm_options& o) {
  if (x.rows() == 0) fail("no samples to fit");
  if (x.cols() == 0) fail("no features to fit");
  if (y.size() != x.rows()) fail("{} labels for {} samples", y.size(), x.rows());
  for (int64_t i = 0; i < y.size(); ++i)
    if (y[i] != 1 && y[i] != -1) fail("label {} of sample {} is not -1 or +1", y[i], i + 1);
  pen.validate();
  if (o.rho1 < 0 || o.rho2 < 0)
    fail("--rho1 and --rho2 must be positive (got {}, {})", o.rho1, o.rho2);
  if (!(o.abs_tol >= 0) || !(o.rel_tol >= 0)) fail("--tol must not be negative");
  if (o.max_iter < 1) fail("--max-iter must be at least 1 (got {})", o.max_iter);
  if (!(o.relaxation >= 1 && o.relaxation < 2))
    fail("--relax must be in [1, 2) (got {})", o.relaxation);
  if (o.l1_weights.size() != 0) {
    if (pen.kind != penalty_kind::l1) fail("l1_weights need the l1 penalty");
    if (o.l1_weights.size() != x.cols())
      fail("{} l1_weights for {} features", o.l1_weights.size(), x.cols());
    if (!(o.l1_weights.array() >= 0).all()) fail("l1_weights must not be negative");
  }
}

// What the stopping rule of a working set's ADMM adds for the columns left
// out, so that it stops where the whole problem's would: their count (in the
// absolute tolerance's sqrt(n + p)) and rho1^2 |u1|^2 over them.
// `check`, when set, is called every check_every iterations with the
// current u2 and rho2; it returns true when the working set must grow (the
// run then stops, not converged, with its state).
struct left_out {
  int64_t cols = 0;
  double dual_sq = 0;
  int iteration_offset = 0;  // earlier runs' iterations, for the monitor
  int check_every = 0;
  std::function<bool(const Eigen::VectorXd& u2, double rho2)> check;
};

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

// ADMM over every column of x.
admm_result solve_all(const design_matrix& x, const Eigen::VectorXd& y, const penalty& pen,
                      const admm_options& o, const admm_monitor& monitor, const admm_state* start,
                      const left_out& out = {}) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t n = x.rows(), p = x.cols();
  const bool warm = start && !start->empty();
  double rho1 = o.rho1, rho2 = o.rho2;
  {
    double d1, d2;
    default_rhos(n, p, pen, d1, d2);
    if (warm) d1 = std::max(start->rho1, pen.rho_threshold() * 1.0001), d2 = start->rho2;
    if (rho1 == 0) rho1 = d1;
    if (rho2 == 0) rho2 = d2;
  }
  const Eigen::VectorXd xbar = x.col_sums() / double(n);  // (p)
  const design_operator xc(x, xbar, false);               // X_c = X - 1 xbar^T
  auto solver = make_w_solver(xc, o.method, rho1, rho2, o.dense_limit, o.cg);

  Eigen::VectorXd w = Eigen::VectorXd::Zero(p), z = w, u1 = w, z_prev(p);                  // (p)
  Eigen::VectorXd r = Eigen::VectorXd::Ones(n), u2 = Eigen::VectorXd::Zero(n), r_prev(n);  // (n)
  Eigen::VectorXd t(n), q(p), xw(n), m(n), v(n), w_hat(p), m_hat(n);
  if (warm) {
    // The scaled duals u = y / rho follow the rhos actually used.
    z = start->z, u1 = start->u1 * (start->rho1 / rho1);
    r = start->r, u2 = start->u2 * (start->rho2 / rho2);
  }
  const double alpha = o.relaxation;
  // Woodbury on dense data: keep X_c z (z is sparse: O(n nnz(z)) per
  // iteration) and X_c u1 (updated from X_c w) so that the w-step needs one
  // dense product (with X_c^T) instead of two: on wide dense data those
  // products dominate an iteration.
  const bool track = o.track_products && solver->method() == w_method::woodbury && !x.is_sparse();
  Eigen::VectorXd mz(n), mz_prev(n), mu1(n), mq(n);
  // Dense data without Woodbury's tracked products: one fused pass over the
  // rows per iteration (fused_row_pass). xtt = X_c^T t, tsum = sum(t) for
  // the t of the next w-step.
  const bool fused = o.fuse_rows && !x.is_sparse() && !track;
  Eigen::VectorXd xtt(p);
  double tsum = 0;
  const auto start_t = [&] {
    t = y.array() * (1.0 - r.array() - u2.array());
    tsum = t.sum();
    xc.transpose_times(t, xtt);
  };
  if (fused) start_t();
  // nz_known: zz's non-zero count when the caller has it (else -1).
  auto sparse_times = [&](const Eigen::VectorXd& zz, Eigen::VectorXd& out, int64_t nz_known) {
    const int64_t nz = nz_known >= 0 ? nz_known : (zz.array() != 0).count();
    if (nz * 8 > p) {
      xc.times(zz, out);
      return;
    }
    out.setZero();
    const auto& xd = x.dense();
    for (int64_t j = 0; j < p; ++j)
      if (zz[j] != 0) out += zz[j] * xd.col(j);
    out.array() -= xbar.dot(zz);
  };
  if (track) sparse_times(z, mz, -1);
  const bool weighted = o.l1_weights.size() != 0;
  const Eigen::VectorXd unit_weights =
      weighted && !o.l1_start ? Eigen::VectorXd() : Eigen::VectorXd::Ones(p);
  double b = 0;
  const double sqrt_dim = std::sqrt(double(n + p + out.cols));
  admm_result res;
  rho_control control(o.rho_control, pen.rho_threshold());
  // Nonconvex penalties start from the L1 fit with the same lambda (phase 1),
  // then continue from that state with their own prox (phase 2).
  bool l1_phase = o.l1_start && pen.kind != penalty_kind::l1;
  const penalty l1_pen{penalty_kind::l1, pen.lambda, 0};
  int phase_start = 0;
  int it = 0;
  double s_rm = 0, s_dr = 0, s_m = 0, s_r = 0, s_u2 = 0;  // the rows' sums
  for (it = 1; it <= o.max_iter; ++it) {
    const penalty& active = l1_phase ? l1_pen : pen;
    const double tol_hint = it == 1 ? 1.0 : 0.1 * res.primal_residual / std::sqrt(double(n));
    if (fused) {
      // w, b, then the rows (r, u2 and the next t) in one pass.
      const double tbar = tsum / double(n);
      q = z - u1;
      solver->solve_given_mt(q, xtt, w, tol_hint);
      const double c0 = xbar.dot(w);
      b = tbar - c0;
      z_prev.swap(z);
      if (alpha != 1) w_hat = alpha * w + (1 - alpha) * z_prev;
      const row_sums rs = fused_row_pass(x.dense(), xbar, w, c0, tbar, y, alpha,
                                         1.0 / (double(n) * rho2), r, u2, xtt);
      tsum = rs.t;
      s_rm = rs.rm, s_dr = rs.dr, s_m = rs.m, s_r = rs.r, s_u2 = rs.u2;
    } else {
      // w, b: the first block.
      t = y.array() * (1.0 - r.array() - u2.array());
      const double tbar = t.mean();
      t.array() -= tbar;
      q = z - u1;
      // w = (rho1 I + rho2 X_c^T X_c)^-1 (rho1 q + rho2 X_c^T t), xw = X_c w.
      // Inexact for CG: a tenth of the last relative primal residual.
      if (track) {
        if ((it - 1) % 100 == 0) xc.times(u1, mu1);  // bound the drift of the updates
        mq = mz - mu1;
        solver->solve_split_given(q, mq, t, w, xw);
      } else {
        solver->solve_split(q, t, w, xw, tol_hint);
      }
      b = tbar - xbar.dot(w);
      m = y.array() * (xw.array() + tbar);  // X w + b = X_c w + tbar
      // r, z: the second block (separable).
      r_prev.swap(r);
      z_prev.swap(z);
      // Over-relaxed copies of the first block's output (alpha = 1: w, m).
      if (alpha != 1) {
        w_hat = alpha * w + (1 - alpha) * z_prev;
        m_hat = alpha * m.array() + (1 - alpha) * (1.0 - r_prev.array());
      }
      const Eigen::VectorXd& mh = alpha != 1 ? m_hat : m;
      v = 1.0 - mh.array() - u2.array();
      hinge_prox(v, 1.0 / (double(n) * rho2), r);
      u2.array() += r.array() + mh.array() - 1.0;
      s_rm = (r.array() + m.array() - 1.0).matrix().squaredNorm();
      s_dr = (r - r_prev).squaredNorm(), s_m = m.squaredNorm(), s_r = r.squaredNorm();
      s_u2 = u2.squaredNorm();
    }  // !fused
    const Eigen::VectorXd& wh = alpha != 1 ? w_hat : w;
    // The L1 / weighted-L1 second block in one vectorised pass: z = soft(wh +
    // u1), u1 += wh - z and the p-length sums of the stopping rule (one read
    // of the p-length vectors instead of one per quantity).
    double s_wz = 0, s_dz = 0, s_u1 = 0, s_w = 0, s_z = 0, s_nz = 0;
    const bool soft_block = (weighted && !l1_phase) || active.kind == penalty_kind::l1;
    if (soft_block) {
      const double tau = pen.lambda / rho1;
      // Plain L1 runs the weighted loop with unit weights: no branch on a
      // null weight pointer inside the loop, which would keep it from
      // vectorising as well.
      const double* wt = weighted && !l1_phase ? o.l1_weights.data() : unit_weights.data();
      double* zp = z.data();
      double* up = u1.data();
      const double* whp = wh.data();
      const double* wp = w.data();
      const double* zq = z_prev.data();
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
    } else {
      active.prox(wh + u1, rho1, z);
    }
    if (track) {
      // X_c u1 follows u1 += wh - z: X_c wh = alpha xw + (1 - alpha) X_c z_prev.
      mz_prev.swap(mz);
      sparse_times(z, mz, soft_block ? int64_t(s_nz) : -1);
      mu1 += (alpha != 1 ? (alpha * xw + (1 - alpha) * mz_prev).eval() : xw) - mz;
    }
    // Scaled duals.
    if (!soft_block) {
      u1 += wh - z;
      s_wz = (w - z).squaredNorm(), s_dz = (z - z_prev).squaredNorm();
      s_u1 = u1.squaredNorm(), s_w = w.squaredNorm(), s_z = z.squaredNorm();
    }

    const double pri = std::sqrt(s_wz + s_rm);
    const double dual = std::sqrt(rho1 * rho1 * s_dz + rho2 * rho2 * s_dr);
    const double eps_pri =
        sqrt_dim * o.abs_tol +
        o.rel_tol * std::max({std::sqrt(s_w + s_m), std::sqrt(s_z + s_r), std::sqrt(double(n))});
    const double eps_dual =
        sqrt_dim * o.abs_tol +
        o.rel_tol * std::sqrt(rho1 * rho1 * s_u1 + out.dual_sq + rho2 * rho2 * s_u2);
    res.primal_residual = pri, res.dual_residual = dual;
    if (monitor && !monitor(out.iteration_offset + it, pri, dual)) break;
    if (out.check && it % out.check_every == 0 && out.check(u2, rho2)) break;
    if (pri <= eps_pri && dual <= eps_dual) {
      if (!l1_phase) {
        res.converged = true;
        break;
      }
      l1_phase = false;
      phase_start = it;
      control = rho_control(o.rho_control, pen.rho_threshold());
      continue;
    }
    if (const double f = control.factor(it - phase_start, pri, dual, rho1); f != 1) {
      rho1 *= f, rho2 *= f;
      u1 /= f, u2 /= f;  // scaled duals: u = y / rho
      if (track) mu1 /= f;
      solver->set_rho(rho1, rho2);
      if (fused) start_t();  // t depends on u2
    }
  }
  res.iterations = std::min(it, o.max_iter);
  res.rho1 = rho1, res.rho2 = rho2;
  res.rho_changes = control.changes();
  res.method = solver->method();
  res.cg_iterations = solver->inner_iterations();
  res.state.z = z, res.state.u1 = std::move(u1), res.state.r = std::move(r);
  res.state.u2 = std::move(u2), res.state.rho1 = rho1, res.state.rho2 = rho2;
  res.w = std::move(z);
  res.b = b;
  if (o.polish_bias) {
    x.times(res.w, xw);
    res.b = best_bias(y, xw, b);
  }
  res.objective = weighted ? weighted_objective(x, y, res.w, res.b, pen.lambda, o.l1_weights)
                           : objective(x, y, res.w, res.b, pen);
  res.time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

// Screening (admm_options::screening): ADMM over a working set of columns,
// then the KKT conditions of the whole problem on the columns left out.
// At an optimum of the hinge split, rho2 u2 = -s/n with s the hinge
// subgradients, and the hinge term's gradient is g = rho2 X_c^T (y .* u2); a
// column j held at zero is optimal iff |g_j| <= lambda_j. The columns that
// violate it (by more than screen_slack) join the set and ADMM continues
// from where it stopped (their z = 0 and their u1 = -g/rho1 clipped to
// +-lambda_j/rho1: the w-step's optimality within the z-step's range).
admm_result solve_screened(const design_matrix& x, const Eigen::VectorXd& y, const penalty& pen,
                           const admm_options& o, const admm_monitor& monitor,
                           const admm_state* start) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t n = x.rows(), p = x.cols();
  const bool weighted = o.l1_weights.size() != 0;
  const auto limit = [&](int64_t j) { return pen.lambda * (weighted ? o.l1_weights[j] : 1.0); };
  const design_operator xc(x, x.col_sums() / double(n), false);
  const int64_t batch = std::max<int64_t>(2 * n, 64);  // columns added per round at most

  // The state of the whole problem, kept between rounds.
  admm_state full;
  bool have_state = start && !start->empty();
  if (have_state) full = *start;
  Eigen::VectorXd g(p), v(n);  // g: the hinge term's gradient (p)
  // g = rho2 X_c^T (y .* u2) from the hinge split's scaled dual.
  const auto gradient = [&](const Eigen::VectorXd& u2, double rho2) {
    v = rho2 * y.cwiseProduct(u2);
    xc.transpose_times(v, g);
  };
  // |g_j| / lambda_j: above 1 (+ screen_slack), a zero column j violates.
  const auto score = [&](int64_t j) {
    const double lj = limit(j), a = std::abs(g[j]);
    return lj > 0 ? a / lj : (a > 0 ? HUGE_VAL : 0.0);
  };
  // Before any ADMM: from the start's duals, or at w = 0 where (with |b| < 1)
  // every margin is below 1 (s = 1, u2 = -1/(n rho2)).
  if (have_state)
    gradient(full.u2, full.rho2);
  else
    gradient(Eigen::VectorXd::Constant(n, -1.0 / double(n)), 1.0);

  std::vector<char> in(size_t(p), 0);
  std::vector<int64_t> set;
  // Adds the (at most `count`) left-out columns of largest |g_j| / lambda_j
  // that pass `admit`.
  const auto add_top = [&](int64_t count, const auto& admit) {
    std::vector<std::pair<double, int64_t>> cand;
    for (int64_t j = 0; j < p; ++j)
      if (!in[size_t(j)] && admit(score(j))) cand.emplace_back(-score(j), j);
    const auto k = std::min<size_t>(cand.size(), size_t(count));
    std::partial_sort(cand.begin(), cand.begin() + int64_t(k), cand.end());
    for (size_t i = 0; i < k; ++i) in[size_t(cand[i].second)] = 1, set.push_back(cand[i].second);
    std::sort(set.begin(), set.end());
    return k;
  };
  if (have_state)
    for (int64_t j = 0; j < p; ++j)
      if (full.z[j] != 0) in[size_t(j)] = 1, set.push_back(j);
  add_top(batch, [](double) { return true; });

  admm_result res;
  int iterations = 0, rounds = 0, rho_changes = 0;
  int64_t cg = 0, last_k = 0;
  for (;;) {
    ++rounds;
    const int64_t k = int64_t(set.size());
    const design_matrix sub = k == p ? design_matrix() : x.select_cols(set);
    admm_options so = o;
    so.screening = false;
    so.max_iter = o.max_iter - iterations;
    if (weighted) {
      for (int64_t i = 0; i < k; ++i) so.l1_weights[i] = o.l1_weights[set[size_t(i)]];
      so.l1_weights.conservativeResize(k);
    }
    admm_state s0;
    if (have_state) {
      s0.z.resize(k), s0.u1.resize(k);
      for (int64_t i = 0; i < k; ++i) {
        const int64_t j = set[size_t(i)];
        s0.z[i] = full.z[j], s0.u1[i] = full.u1[j];
      }
      s0.r = full.r, s0.u2 = full.u2, s0.rho1 = full.rho1, s0.rho2 = full.rho2;
    }
    left_out lo;
    lo.cols = p - k;
    if (have_state)
      for (int64_t j = 0; j < p; ++j)
        if (!in[size_t(j)]) lo.dual_sq += std::pow(full.rho1 * full.u1[j], 2);
    // During the run, every check_every iterations: stop as soon as a
    // left-out column violates its condition (no iterations spent on a set
    // that must grow anyway).
    bool grow = false;
    lo.check_every = screen_check_every;
    lo.check = [&](const Eigen::VectorXd& u2, double rho2) {
      gradient(u2, rho2);
      for (int64_t j = 0; j < p && !grow; ++j) grow = !in[size_t(j)] && score(j) > 1 + screen_slack;
      return grow;
    };
    lo.iteration_offset = iterations;
    res = solve_all(k == p ? x : sub, y, pen, so, monitor, have_state ? &s0 : nullptr, lo);
    iterations += res.iterations, cg += res.cg_iterations, rho_changes += res.rho_changes;
    // Back to the whole problem: left-out columns are zero, their scaled dual
    // follows from the w-step's optimality rho1 u1 + g = 0 (clipped to the
    // range the z-step allows).
    full.rho1 = res.state.rho1, full.rho2 = res.state.rho2;
    full.r = std::move(res.state.r), full.u2 = std::move(res.state.u2);
    gradient(full.u2, full.rho2);
    full.z = Eigen::VectorXd::Zero(p);
    full.u1.resize(p);
    for (int64_t j = 0; j < p; ++j) {
      const double c = limit(j) / full.rho1;
      full.u1[j] = std::clamp(-g[j] / full.rho1, -c, c);
    }
    for (int64_t i = 0; i < k; ++i)
      full.z[set[size_t(i)]] = res.state.z[i], full.u1[set[size_t(i)]] = res.state.u1[i];
    have_state = true;
    last_k = k;
    // Stopped inside the run (iteration cap, monitor): not converged.
    if ((!res.converged && !grow) || k == p) break;
    // The left-out columns are checked on the final state of every run, also
    // one that converged on its last allowed iteration: a violator means the
    // whole problem has not converged.
    const size_t added = add_top(batch, [](double sc) { return sc > 1 + screen_slack; });
    if (added > 0 && iterations >= o.max_iter) {
      res.converged = false;
      break;
    }
    // No violator left: done when the run converged; a run stopped by the
    // check found violators in this same state, so this is only a guard
    // (continue on the same set, budget permitting).
    if (added == 0 && (res.converged || iterations >= o.max_iter)) break;
  }
  res.iterations = iterations, res.cg_iterations = cg, res.rho_changes = rho_changes;
  res.screen_rounds = rounds;
  res.working_set = last_k;
  res.w = full.z;
  res.state = std::move(full);
  res.time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace

admm_result admm_solve(const design_matrix& x, const Eigen::VectorXd& y, const penalty& pen,
                       const admm_options& o, const admm_monitor& monitor,
                       const admm_state* start) {
  check_inputs(x, y, pen, o);
  const int64_t n = x.rows(), p = x.cols();
  if (start && !start->empty() &&
      (start->z.size() != p || start->u1.size() != p || start->r.size() != n ||
       start->u2.size() != n || !(start->rho1 > 0) || !(start->rho2 > 0)))
    fail("warm start of size ({}, {}) for data of {} samples x {} features", start->r.size(),
         start->z.size(), n, p);
  if (o.screening && pen.kind == penalty_kind::l1 && !o.l1_start &&
      double(p) >= o.screen_ratio * double(n) && p > 4 * std::max<int64_t>(2 * n, 64))
    return solve_screened(x, y, pen, o, monitor, start);
  admm_result res = solve_all(x, y, pen, o, monitor, start);
  res.working_set = p;
  return res;
}

}  // namespace merak::svm
