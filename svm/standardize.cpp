#include "svm/standardize.hpp"

#include <cmath>

#include "core/error.hpp"

namespace merak::svm {

void column_stats::merge(const column_stats& other) {
  if (n == 0) {
    *this = other;
    return;
  }
  MERAK_CHECK(sum.size() == other.sum.size());
  n += other.n;
  sum += other.sum;
  sq_sum += other.sq_sum;
}

column_stats compute_column_stats(const design_matrix& x) {
  return column_stats{x.rows(), x.col_sums(), x.col_sq_sums()};
}

Eigen::VectorXd scaling_from_stats(const column_stats& s) {
  const int64_t p = s.sum.size();
  Eigen::VectorXd scale(p);
  const double n = double(std::max<int64_t>(s.n, 1));
  for (int64_t j = 0; j < p; ++j) {
    const double mean = s.sum[j] / n;
    const double var = std::max(0.0, s.sq_sum[j] / n - mean * mean);
    const double sd = std::sqrt(var);
    scale[j] = sd > 1e-12 * (1 + std::abs(mean)) ? 1 / sd : 1.0;
  }
  return scale;
}

}  // namespace merak::svm
