#pragma once
// M = [X - 1 mu^T, (1)] : the data matrix with its columns shifted by mu
// (column centring, mu may be empty for none) and, optionally, a column of
// ones appended (the bias of consensus ADMM). Products with M never form the
// shifted matrix, so sparse X stays sparse.
//
//   single-machine ADMM:  M = X_c = X - 1 xbar^T      (n x p)
//   consensus worker k:   M = [X_k, 1]                (n_k x (p + 1))

#include "svm/design_matrix.hpp"

namespace merak::svm {

class design_operator {
 public:
  // x must outlive the operator.
  design_operator(const design_matrix& x, Eigen::VectorXd shift, bool ones_column);

  int64_t rows() const { return x_->rows(); }
  int64_t cols() const { return x_->cols() + (ones_ ? 1 : 0); }
  const design_matrix& data() const { return *x_; }

  void times(const Eigen::VectorXd& q, Eigen::VectorXd& out) const;            // (n)
  void transpose_times(const Eigen::VectorXd& v, Eigen::VectorXd& out) const;  // (d)
  Eigen::MatrixXd gram_cols() const;                                           // M^T M  (d x d)
  Eigen::MatrixXd gram_rows() const;                                           // M M^T  (n x n)
  Eigen::VectorXd col_sq_norms() const;

 private:
  const design_matrix* x_;
  Eigen::VectorXd shift_;  // (p) or empty
  bool ones_;
  mutable Eigen::VectorXd tmp_;
};

}  // namespace merak::svm
