#pragma once
// How far (w, b) is from a stationary point of
//   F(w, b) = (1/n) sum_i max(0, 1 - m_i) + sum_j P(w_j),  m_i = y_i (x_i^T w + b),
// by the first-order conditions of the problem in docs/svm.md: there
// are hinge subgradients s_i (1 where m_i < 1, 0 where m_i > 1, anything in
// [0, 1] where m_i = 1) with
//   bias:        (1/n) sum_i s_i y_i = 0
//   w_j != 0:    (1/n) sum_i s_i y_i x_ij = P'(|w_j|) sign(w_j)
//   w_j == 0:    |(1/n) sum_i s_i y_i x_ij| <= P'(0+)
// Margins within `margin_tol` of 1 count as "= 1". GLPK finds the s on those
// samples that minimises the largest violation t; returns t (0: stationary).

#include <glpk.h>

#include <memory>
#include <vector>

#include "svm/dataset.hpp"
#include "svm/penalty.hpp"

namespace merak::svm::test {

inline double stationarity_violation(const dataset& d, const Eigen::VectorXd& w, double b,
                                     const penalty& pen, double margin_tol = 1e-4) {
  const int64_t n = d.rows(), p = d.cols();
  Eigen::MatrixXd x =
      d.x.is_sparse() ? Eigen::MatrixXd(d.x.sparse()) : Eigen::MatrixXd(d.x.dense());
  const Eigen::VectorXd m = d.y.cwiseProduct(x * w + Eigen::VectorXd::Constant(n, b));
  std::vector<int64_t> free_rows;
  Eigen::VectorXd s_fixed = Eigen::VectorXd::Zero(n);  // (n)
  for (int64_t i = 0; i < n; ++i) {
    if (std::abs(m[i] - 1) <= margin_tol)
      free_rows.push_back(i);
    else if (m[i] < 1)
      s_fixed[i] = 1;
  }
  // Condition k (0: bias, 1 + j: weight j) reads c_k + sum_E a_ki s_i
  // against target g_k (equality, or |.| <= g_k for a zero weight).
  std::unique_ptr<glp_prob, void (*)(glp_prob*)> lp(glp_create_prob(), glp_delete_prob);
  glp_set_obj_dir(lp.get(), GLP_MIN);
  const int ne = int(free_rows.size());
  glp_add_cols(lp.get(), ne + 1);  // s_E (1..ne), t (ne + 1)
  for (int e = 1; e <= ne; ++e) glp_set_col_bnds(lp.get(), e, GLP_DB, 0, 1);
  glp_set_col_bnds(lp.get(), ne + 1, GLP_LO, 0, 0);
  glp_set_obj_coef(lp.get(), ne + 1, 1);
  std::vector<int> ia{0}, ja{0};
  std::vector<double> ar{0};
  auto add_condition = [&](const Eigen::VectorXd& coef, double target, bool equality) {
    // coef: (n) the weights of s_i; two rows: expr - t <= hi, expr + t >= lo.
    const double c = coef.dot(s_fixed);
    const double hi = target - c;
    const double lo = equality ? target - c : -target - c;
    const int r = glp_add_rows(lp.get(), 2);
    glp_set_row_bnds(lp.get(), r, GLP_UP, 0, hi);
    glp_set_row_bnds(lp.get(), r + 1, GLP_LO, lo, 0);
    for (int e = 0; e < ne; ++e) {
      const double a = coef[free_rows[e]];
      if (a == 0) continue;
      ia.push_back(r), ja.push_back(e + 1), ar.push_back(a);
      ia.push_back(r + 1), ja.push_back(e + 1), ar.push_back(a);
    }
    ia.push_back(r), ja.push_back(ne + 1), ar.push_back(-1);
    ia.push_back(r + 1), ja.push_back(ne + 1), ar.push_back(1);
  };
  add_condition(d.y / double(n), 0, true);
  for (int64_t j = 0; j < p; ++j) {
    const Eigen::VectorXd coef = d.y.cwiseProduct(x.col(j)) / double(n);
    if (w[j] != 0)
      add_condition(coef, pen.slope(w[j]) * (w[j] > 0 ? 1 : -1), true);
    else
      add_condition(coef, pen.slope(0), false);
  }
  glp_load_matrix(lp.get(), int(ia.size()) - 1, ia.data(), ja.data(), ar.data());
  glp_smcp parm;
  glp_init_smcp(&parm);
  parm.msg_lev = GLP_MSG_OFF;
  if (glp_simplex(lp.get(), &parm) != 0 || glp_get_status(lp.get()) != GLP_OPT) return 1e300;
  return glp_get_obj_val(lp.get());
}

}  // namespace merak::svm::test
