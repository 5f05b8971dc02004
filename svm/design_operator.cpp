#include "svm/design_operator.hpp"

#include "core/error.hpp"

namespace merak::svm {

design_operator::design_operator(const design_matrix& x, Eigen::VectorXd shift, bool ones_column)
    : x_(&x), shift_(std::move(shift)), ones_(ones_column) {
  MERAK_CHECK(shift_.size() == 0 || shift_.size() == x.cols());
}

void design_operator::times(const Eigen::VectorXd& q, Eigen::VectorXd& out) const {
  const int64_t p = x_->cols();
  MERAK_CHECK(q.size() == cols());
  if (ones_) {
    tmp_ = q.head(p);
    x_->times(tmp_, out);
    out.array() += q[p];
  } else {
    x_->times(q, out);
  }
  if (shift_.size()) out.array() -= shift_.dot(q.head(p));
}

void design_operator::transpose_times(const Eigen::VectorXd& v, Eigen::VectorXd& out) const {
  const int64_t p = x_->cols();
  const double sum = v.sum();
  if (ones_) {
    x_->transpose_times(v, tmp_);
    out.resize(p + 1);
    out.head(p) = tmp_;
    out[p] = sum;
  } else {
    x_->transpose_times(v, out);
  }
  if (shift_.size()) out.head(p) -= sum * shift_;
}

Eigen::MatrixXd design_operator::gram_cols() const {
  const int64_t p = x_->cols(), n = x_->rows();
  Eigen::MatrixXd g(cols(), cols());
  g.topLeftCorner(p, p) = x_->gram_cols();
  Eigen::VectorXd colsum = x_->col_sums();
  if (shift_.size()) {
    // (X - 1 mu^T)^T (X - 1 mu^T) = X^T X - s mu^T - mu s^T + n mu mu^T, s = X^T 1
    g.topLeftCorner(p, p) -= colsum * shift_.transpose() + shift_ * colsum.transpose();
    g.topLeftCorner(p, p) += double(n) * shift_ * shift_.transpose();
    colsum -= double(n) * shift_;
  }
  if (ones_) {
    g.col(p).head(p) = colsum;
    g.row(p).head(p) = colsum.transpose();
    g(p, p) = double(n);
  }
  return g;
}

Eigen::MatrixXd design_operator::gram_rows() const {
  Eigen::MatrixXd g = x_->gram_rows();
  if (shift_.size()) {
    // (X - 1 mu^T)(X - 1 mu^T)^T = X X^T - a 1^T - 1 a^T + |mu|^2 1 1^T, a = X mu
    Eigen::VectorXd a;
    x_->times(shift_, a);
    g.colwise() -= a;
    g.rowwise() -= a.transpose();
    g.array() += shift_.squaredNorm();
  }
  if (ones_) g.array() += 1.0;
  return g;
}

Eigen::VectorXd design_operator::col_sq_norms() const {
  const int64_t p = x_->cols(), n = x_->rows();
  Eigen::VectorXd d(cols());
  d.head(p) = x_->col_sq_sums();
  if (shift_.size())
    d.head(p).array() +=
        -2.0 * shift_.array() * x_->col_sums().array() + double(n) * shift_.array().square();
  if (ones_) d[p] = double(n);
  return d;
}

}  // namespace merak::svm
