#include "svm/w_step.hpp"

#include <Eigen/Cholesky>

#include <algorithm>

#include "core/error.hpp"

namespace merak::svm {
namespace {

// An LLT of an empty matrix: Eigen leaves a default-constructed LLT's status
// unset, and assigning or copying one reads it (undefined behaviour).
Eigen::LLT<Eigen::MatrixXd> empty_llt() {
  return Eigen::LLT<Eigen::MatrixXd>(Eigen::MatrixXd(0, 0));
}

Eigen::LLT<Eigen::MatrixXd> factor(const Eigen::MatrixXd& gram, double diag) {
  Eigen::MatrixXd a = gram;
  a.diagonal().array() += diag;
  Eigen::LLT<Eigen::MatrixXd> llt(a);
  if (llt.info() != Eigen::Success)
    fail("w-step factorisation failed (matrix not positive definite; rho too small?)");
  return llt;
}

// rho1 I + rho2 M^T M, factored. Up to kExplicitInverseMax columns the
// solver keeps the inverse instead of the factor: one matrix-vector product
// per solve instead of two triangular solves, which Eigen does not vectorise
// as well (on small dense problems the solves are a large share of a fit).
// The inverse costs ~3x the factorisation (in flops) once per rho ratio. Its
// forward error grows with the condition number of r I + G (r = rho1/rho2,
// G = M^T M), at most 1 + trace(G)/r; the inverse is kept only while that
// bound is below kExplicitInverseCond (on standardised data with the
// default rhos, trace(G) = n d and r >= 30: sonar's bound is ~200).
constexpr int64_t kExplicitInverseMax = 512;
constexpr double kExplicitInverseCond = 1e6;

class cholesky_solver final : public w_solver {
 public:
  cholesky_solver(const design_operator& m, double rho1, double rho2)
      : w_solver(m, rho1, rho2), gram_(m.gram_cols()) {
    set_rho(rho1, rho2);
  }
  // Factors (rho1/rho2) I + M^T M, so that scaling both rhos together (what
  // residual balancing does) needs no new factorisation.
  void set_rho(double rho1, double rho2) override {
    if (rho1 / rho2 != ratio_) {
      llt_ = factor(gram_, rho1 / rho2);
      inverse_.resize(0, 0);
      if (gram_.rows() <= kExplicitInverseMax &&
          1 + gram_.trace() / (rho1 / rho2) <= kExplicitInverseCond) {
        inverse_ = llt_.solve(Eigen::MatrixXd::Identity(gram_.rows(), gram_.cols()));
        llt_ = empty_llt();  // the factor's memory back
      }
    }
    ratio_ = rho1 / rho2, rho1_ = rho1, rho2_ = rho2;
  }
  void solve(const Eigen::VectorXd& q, Eigen::VectorXd& w, double) override {
    if (inverse_.size()) {
      w.noalias() = inverse_ * q;
      w /= rho2_;
    } else {
      w = llt_.solve(q) / rho2_;
    }
  }
  w_method method() const override { return w_method::cholesky; }

 private:
  Eigen::MatrixXd gram_;  // M^T M (d x d)
  Eigen::LLT<Eigen::MatrixXd> llt_ = empty_llt();
  Eigen::MatrixXd inverse_;  // ((rho1/rho2) I + M^T M)^-1, when d is small
  double ratio_ = -1;
};

// (rho1 I + rho2 M^T M)^-1 = (I - M^T ((rho1/rho2) I + M M^T)^-1 M) / rho1.
class woodbury_solver final : public w_solver {
 public:
  woodbury_solver(const design_operator& m, double rho1, double rho2)
      : w_solver(m, rho1, rho2), gram_(m.gram_rows()) {
    set_rho(rho1, rho2);
  }
  void set_rho(double rho1, double rho2) override {
    if (rho1 / rho2 != ratio_) llt_ = factor(gram_, rho1 / rho2);
    ratio_ = rho1 / rho2, rho1_ = rho1, rho2_ = rho2;
  }
  // With q = rho1 a + rho2 M^T t and G = M M^T:
  //   M q = rho1 M a + rho2 G t,  s = C^-1 M q,
  //   w = a + M^T g,  M w = M a + G g,  where g = (rho2/rho1) t - s/rho1.
  void solve_split(const Eigen::VectorXd& a, const Eigen::VectorXd& t, Eigen::VectorXd& w,
                   Eigen::VectorXd& mw, double) override {
    m_.times(a, ma_);  // (n)
    solve_split_given(a, ma_, t, w, mw);
  }
  void solve_split_given(const Eigen::VectorXd& a, const Eigen::VectorXd& ma,
                         const Eigen::VectorXd& t, Eigen::VectorXd& w, Eigen::VectorXd& mw,
                         double = 0) override {
    if (&ma != &ma_) ma_ = ma;
    g_.noalias() = gram_.selfadjointView<Eigen::Lower>() * t;
    g_ = rho1_ * ma_ + rho2_ * g_;  // M q
    g_ = llt_.solve(g_);            // C^-1 M q
    g_ = (rho2_ / rho1_) * t - g_ / rho1_;
    m_.transpose_times(g_, w);
    w += a;
    mw.noalias() = gram_.selfadjointView<Eigen::Lower>() * g_;
    mw += ma_;
  }
  void solve(const Eigen::VectorXd& q, Eigen::VectorXd& w, double) override {
    m_.times(q, mq_);  // (n)
    mq_ = llt_.solve(mq_);
    m_.transpose_times(mq_, w);  // (d)
    w = (q - w) / rho1_;
  }
  w_method method() const override { return w_method::woodbury; }

 private:
  Eigen::MatrixXd gram_;  // M M^T (n x n)
  Eigen::LLT<Eigen::MatrixXd> llt_ = empty_llt();
  double ratio_ = -1;
  Eigen::VectorXd mq_, ma_, g_;
};

class cg_solver final : public w_solver {
 public:
  cg_solver(const design_operator& m, double rho1, double rho2, cg_options options)
      : w_solver(m, rho1, rho2), o_(options), colsq_(m.col_sq_norms()) {
    set_rho(rho1, rho2);
  }
  void set_rho(double rho1, double rho2) override {
    rho1_ = rho1, rho2_ = rho2;
    inv_diag_ = (rho1 + rho2 * colsq_.array()).inverse().matrix();
  }
  void solve(const Eigen::VectorXd& q, Eigen::VectorXd& w, double tol_hint) override {
    if (w.size() != q.size()) w = Eigen::VectorXd::Zero(q.size());
    const double tol = std::clamp(tol_hint, o_.rel_tol, std::max(o_.rel_tol, o_.max_rel_tol));
    const double qn = q.norm();
    if (qn == 0) {
      w.setZero();
      return;
    }
    apply(w, ap_);
    Eigen::VectorXd r = q - ap_;
    Eigen::VectorXd z = inv_diag_.cwiseProduct(r);
    Eigen::VectorXd d = z;
    double rz = r.dot(z);
    for (int k = 0; k < o_.max_iter && r.norm() > tol * qn; ++k) {
      apply(d, ap_);
      const double alpha = rz / d.dot(ap_);
      w += alpha * d;
      r -= alpha * ap_;
      z = inv_diag_.cwiseProduct(r);
      const double rz_next = r.dot(z);
      d = z + (rz_next / rz) * d;
      rz = rz_next;
      ++iters_;
    }
  }
  w_method method() const override { return w_method::cg; }
  int64_t inner_iterations() const override { return iters_; }

 private:
  void apply(const Eigen::VectorXd& x, Eigen::VectorXd& out) {
    m_.times(x, mx_);
    m_.transpose_times(mx_, out);
    out = rho1_ * x + rho2_ * out;
  }
  cg_options o_;
  Eigen::VectorXd colsq_, inv_diag_, ap_, mx_;
  int64_t iters_ = 0;
};

}  // namespace

void w_solver::solve_split(const Eigen::VectorXd& a, const Eigen::VectorXd& t, Eigen::VectorXd& w,
                           Eigen::VectorXd& mw, double tol_hint) {
  m_.transpose_times(t, q_);
  solve_given_mt(a, q_, w, tol_hint);  // coefficient-wise: q_ may be mt
  m_.times(w, mw);
}

w_method parse_w_method(std::string_view name) {
  if (name == "auto") return w_method::automatic;
  if (name == "cholesky") return w_method::cholesky;
  if (name == "woodbury") return w_method::woodbury;
  if (name == "cg") return w_method::cg;
  fail("unknown w-step solver '{}' (expected auto, cholesky, woodbury or cg)", name);
}

const char* w_method_name(w_method m) {
  switch (m) {
    case w_method::automatic:
      return "auto";
    case w_method::cholesky:
      return "cholesky";
    case w_method::woodbury:
      return "woodbury";
    case w_method::cg:
      return "cg";
  }
  return "?";
}

std::unique_ptr<w_solver> make_w_solver(const design_operator& m, w_method method, double rho1,
                                        double rho2, int64_t dense_limit, cg_options cg) {
  MERAK_CHECK(rho1 > 0 && rho2 > 0);
  if (method == w_method::automatic) {
    const int64_t n = m.rows(), d = m.cols();
    if (d <= n && d <= dense_limit)
      method = w_method::cholesky;
    else if (n < d && n <= dense_limit)
      method = w_method::woodbury;
    else
      method = w_method::cg;
  }
  switch (method) {
    case w_method::cholesky:
      return std::make_unique<cholesky_solver>(m, rho1, rho2);
    case w_method::woodbury:
      return std::make_unique<woodbury_solver>(m, rho1, rho2);
    default:
      return std::make_unique<cg_solver>(m, rho1, rho2, cg);
  }
}

}  // namespace merak::svm
