#pragma once
// Feature standardisation by column scaling: column j is multiplied by
// 1/sd_j (its standard deviation; 1 for constant columns). Columns are not
// shifted, so sparse data stays sparse; the ADMM centres implicitly and the
// unpenalised bias absorbs the means. A model fitted on scaled data maps back
// to the data's units by w_j / sd_j with b unchanged.

#include "svm/design_matrix.hpp"

namespace merak::svm {

struct column_stats {
  int64_t n = 0;
  Eigen::VectorXd sum, sq_sum;  // (p)
  // Stats of several row shards combine by adding (consensus workers).
  void merge(const column_stats& other);
};

column_stats compute_column_stats(const design_matrix& x);
// 1/sd_j per column (p); constant columns get 1.
Eigen::VectorXd scaling_from_stats(const column_stats& s);

}  // namespace merak::svm
