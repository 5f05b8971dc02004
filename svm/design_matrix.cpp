#include "svm/design_matrix.hpp"

#include "core/error.hpp"

namespace merak::svm {

void design_matrix::sync() {
  sparse_.makeCompressed();
  sparse_t_ = sparse_.transpose();
  sparse_t_.makeCompressed();
}

void design_matrix::times(const Eigen::VectorXd& w, Eigen::VectorXd& out) const {
  MERAK_CHECK(w.size() == cols());
  if (sparse_data_)
    out.noalias() = sparse_ * w;
  else
    out.noalias() = dense_ * w;
}

void design_matrix::transpose_times(const Eigen::VectorXd& v, Eigen::VectorXd& out) const {
  MERAK_CHECK(v.size() == rows());
  if (sparse_data_)
    out.noalias() = sparse_t_ * v;
  else
    out.noalias() = dense_.transpose() * v;
}

Eigen::MatrixXd design_matrix::gram_cols() const {
  const int64_t p = cols();
  Eigen::MatrixXd g = Eigen::MatrixXd::Zero(p, p);
  if (sparse_data_) {
    // Sum of outer products of the (sparse) rows: O(sum_i nnz_i^2).
    for (int64_t i = 0; i < sparse_.outerSize(); ++i)
      for (sparse_matrix::InnerIterator a(sparse_, i); a; ++a)
        for (sparse_matrix::InnerIterator b(sparse_, i); b && b.col() <= a.col(); ++b)
          g(a.col(), b.col()) += a.value() * b.value();
  } else {
    g.selfadjointView<Eigen::Lower>().rankUpdate(dense_.transpose());
  }
  return g.selfadjointView<Eigen::Lower>();
}

Eigen::MatrixXd design_matrix::gram_rows() const {
  const int64_t n = rows();
  Eigen::MatrixXd g = Eigen::MatrixXd::Zero(n, n);
  if (sparse_data_) {
    sparse_matrix prod = sparse_ * sparse_matrix(sparse_.transpose());
    g = Eigen::MatrixXd(prod);
  } else {
    g.selfadjointView<Eigen::Lower>().rankUpdate(dense_);
    g = g.selfadjointView<Eigen::Lower>();
  }
  return g;
}

Eigen::VectorXd design_matrix::col_sums() const {
  Eigen::VectorXd s = Eigen::VectorXd::Zero(cols());
  if (sparse_data_) {
    for (int64_t i = 0; i < sparse_.outerSize(); ++i)
      for (sparse_matrix::InnerIterator it(sparse_, i); it; ++it) s[it.col()] += it.value();
  } else {
    s = dense_.colwise().sum().transpose();
  }
  return s;
}

Eigen::VectorXd design_matrix::col_sq_sums() const {
  Eigen::VectorXd s = Eigen::VectorXd::Zero(cols());
  if (sparse_data_) {
    for (int64_t i = 0; i < sparse_.outerSize(); ++i)
      for (sparse_matrix::InnerIterator it(sparse_, i); it; ++it)
        s[it.col()] += it.value() * it.value();
  } else {
    s = dense_.colwise().squaredNorm().transpose();
  }
  return s;
}

void design_matrix::scale_columns(const Eigen::VectorXd& s) {
  MERAK_CHECK(s.size() == cols());
  if (sparse_data_) {
    for (int64_t i = 0; i < sparse_.outerSize(); ++i)
      for (sparse_matrix::InnerIterator it(sparse_, i); it; ++it) it.valueRef() *= s[it.col()];
    sync();
  } else {
    dense_ = dense_ * s.asDiagonal();
  }
}

design_matrix design_matrix::select_rows(const std::vector<int64_t>& rows) const {
  const int64_t n = this->rows();
  for (int64_t r : rows) MERAK_CHECK(r >= 0 && r < n, "row {} of {}", r, n);
  if (!sparse_data_) {
    dense_matrix d(int64_t(rows.size()), cols());
    for (size_t k = 0; k < rows.size(); ++k) d.row(int64_t(k)) = dense_.row(rows[k]);
    return design_matrix(std::move(d));
  }
  std::vector<Eigen::Triplet<double, int64_t>> t;
  for (size_t k = 0; k < rows.size(); ++k)
    for (sparse_matrix::InnerIterator it(sparse_, rows[k]); it; ++it)
      t.emplace_back(int64_t(k), it.col(), it.value());
  sparse_matrix s(int64_t(rows.size()), cols());
  s.setFromTriplets(t.begin(), t.end());
  return design_matrix(std::move(s));
}

design_matrix design_matrix::select_cols(const std::vector<int64_t>& cols) const {
  const int64_t p = this->cols();
  for (int64_t c : cols) MERAK_CHECK(c >= 0 && c < p, "column {} of {}", c, p);
  if (!sparse_data_) {
    dense_matrix d(rows(), int64_t(cols.size()));
    for (int64_t i = 0; i < rows(); ++i) {
      const double* src = dense_.row(i).data();
      double* dst = d.row(i).data();
      for (size_t k = 0; k < cols.size(); ++k) dst[k] = src[cols[k]];
    }
    return design_matrix(std::move(d));
  }
  std::vector<int64_t> where(size_t(p), -1);  // old column -> new, or -1
  for (size_t k = 0; k < cols.size(); ++k) where[size_t(cols[k])] = int64_t(k);
  std::vector<Eigen::Triplet<double, int64_t>> t;
  for (int64_t i = 0; i < sparse_.outerSize(); ++i)
    for (sparse_matrix::InnerIterator it(sparse_, i); it; ++it)
      if (const int64_t k = where[size_t(it.col())]; k >= 0) t.emplace_back(i, k, it.value());
  sparse_matrix s(rows(), int64_t(cols.size()));
  s.setFromTriplets(t.begin(), t.end());
  return design_matrix(std::move(s));
}

void design_matrix::resize_cols(int64_t p) {
  MERAK_CHECK(p >= cols());
  if (p == cols()) return;
  if (sparse_data_) {
    sparse_.conservativeResize(sparse_.rows(), p);
    sync();
  } else {
    dense_matrix d = dense_matrix::Zero(dense_.rows(), p);
    d.leftCols(dense_.cols()) = dense_;
    dense_ = std::move(d);
  }
}

}  // namespace merak::svm
