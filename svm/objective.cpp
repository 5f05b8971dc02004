#include "svm/objective.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.hpp"

namespace merak::svm {

dataset dataset::select_rows(const std::vector<int64_t>& rows) const {
  dataset d;
  d.x = x.select_rows(rows);
  d.y.resize(int64_t(rows.size()));
  for (size_t k = 0; k < rows.size(); ++k) d.y[int64_t(k)] = y[rows[k]];
  d.name = name;
  return d;
}

double mean_hinge(const Eigen::VectorXd& y, const Eigen::VectorXd& margin) {
  MERAK_CHECK(y.size() == margin.size() && y.size() > 0);
  return (1.0 - y.array() * margin.array()).max(0.0).sum() / double(y.size());
}

double objective(const design_matrix& x, const Eigen::VectorXd& y, const Eigen::VectorXd& w,
                 double b, const penalty& p) {
  Eigen::VectorXd m;
  x.times(w, m);
  m.array() += b;
  return mean_hinge(y, m) + p.value(w);
}

double weighted_objective(const design_matrix& x, const Eigen::VectorXd& y,
                          const Eigen::VectorXd& w, double b, double lambda,
                          const Eigen::VectorXd& weights) {
  Eigen::VectorXd m;
  x.times(w, m);
  m.array() += b;
  return mean_hinge(y, m) + lambda * weights.cwiseProduct(w.cwiseAbs()).sum();
}

Eigen::VectorXd predict_labels(const design_matrix& x, const Eigen::VectorXd& w, double b) {
  Eigen::VectorXd m;
  x.times(w, m);
  return ((m.array() + b) >= 0).select(Eigen::VectorXd::Ones(m.size()), -1.0);
}

double accuracy(const Eigen::VectorXd& y, const Eigen::VectorXd& predicted) {
  MERAK_CHECK(y.size() == predicted.size() && y.size() > 0);
  return double((y.array() == predicted.array()).count()) / double(y.size());
}

double best_bias(const Eigen::VectorXd& y, const Eigen::VectorXd& xw, double current) {
  // Term i is a hinge in b with its kink at k_i = y_i - xw_i: for y = +1 it
  // is (k_i - b)_+ (slope -1 left of k_i), for y = -1 it is (b - k_i)_+
  // (slope +1 right of k_i). The slope of the sum starts at -#pos left of all
  // kinks and rises by one at each kink; the minimisers are where it crosses
  // zero (a point) or is zero (an interval).
  const int64_t n = y.size();
  MERAK_CHECK(xw.size() == n);
  std::vector<double> k(static_cast<size_t>(n));
  int64_t pos = 0;
  for (int64_t i = 0; i < n; ++i) {
    k[size_t(i)] = y[i] - xw[i];
    pos += y[i] > 0;
  }
  if (n == 0) return current;
  std::sort(k.begin(), k.end());
  int64_t slope = -pos;
  if (slope == 0) return std::min(current, k.front());
  for (size_t j = 0; j < k.size();) {
    size_t e = j;
    while (e < k.size() && k[e] == k[j]) ++e;
    slope += int64_t(e - j);
    if (slope > 0) return k[j];
    if (slope == 0) return std::clamp(current, k[j], e < k.size() ? k[e] : INFINITY);
    j = e;
  }
  return current;  // unreachable: the slope ends at #neg >= 0
}

}  // namespace merak::svm
