#pragma once
// The data matrix X (n x p), dense or sparse (CSR), behind one interface so
// that the solver never densifies sparse data. Rows are samples. Sparse data
// also keeps X^T in CSR (twice the memory) so that both X w and X^T v are
// row-wise gathers, which Eigen runs on all OpenMP threads.

#include <Eigen/Core>
#include <Eigen/SparseCore>

#include <cstdint>
#include <vector>

namespace merak::svm {

using dense_matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using sparse_matrix = Eigen::SparseMatrix<double, Eigen::RowMajor, int64_t>;

class design_matrix {
 public:
  design_matrix() = default;
  explicit design_matrix(dense_matrix x) : dense_(std::move(x)), sparse_data_(false) {}
  explicit design_matrix(sparse_matrix x) : sparse_(std::move(x)), sparse_data_(true) { sync(); }

  bool is_sparse() const { return sparse_data_; }
  int64_t rows() const { return sparse_data_ ? sparse_.rows() : dense_.rows(); }
  int64_t cols() const { return sparse_data_ ? sparse_.cols() : dense_.cols(); }
  // Stored entries (n*p for dense data).
  int64_t nnz() const { return sparse_data_ ? sparse_.nonZeros() : dense_.size(); }
  const dense_matrix& dense() const { return dense_; }
  const sparse_matrix& sparse() const { return sparse_; }

  // out = X w  (n).
  void times(const Eigen::VectorXd& w, Eigen::VectorXd& out) const;
  // out = X^T v  (p).
  void transpose_times(const Eigen::VectorXd& v, Eigen::VectorXd& out) const;
  // X^T X (p x p) and X X^T (n x n), dense.
  Eigen::MatrixXd gram_cols() const;
  Eigen::MatrixXd gram_rows() const;
  // Per-column sums and sums of squares (p).
  Eigen::VectorXd col_sums() const;
  Eigen::VectorXd col_sq_sums() const;

  // Multiplies column j by s[j] in place (sparsity is kept).
  void scale_columns(const Eigen::VectorXd& s);
  // The given rows, in the given order.
  design_matrix select_rows(const std::vector<int64_t>& rows) const;
  // The given columns, in the given order.
  design_matrix select_cols(const std::vector<int64_t>& cols) const;
  // Adds zero columns up to p (data files may not mention the last features).
  void resize_cols(int64_t p);

 private:
  void sync();  // rebuilds sparse_t_ from sparse_
  dense_matrix dense_;
  sparse_matrix sparse_;
  sparse_matrix sparse_t_;  // X^T (p x n), CSR
  bool sparse_data_ = false;
};

}  // namespace merak::svm
