#include "svm/select.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/error.hpp"

namespace merak::svm {

std::vector<int> stratified_folds(const Eigen::VectorXd& y, int folds, uint64_t seed) {
  const int64_t n = y.size();
  if (folds < 2) fail("--folds must be at least 2 (got {})", folds);
  if (folds > n) fail("--folds {} exceeds the {} samples", folds, n);
  std::vector<int64_t> pos, neg;
  for (int64_t i = 0; i < n; ++i) (y[i] > 0 ? pos : neg).push_back(i);
  // A fixed generator and a shuffle written out here: std::shuffle's
  // algorithm is the library's choice, and folds must not change with it.
  std::mt19937_64 rng(seed);
  auto shuffle = [&](std::vector<int64_t>& v) {
    for (size_t i = v.size(); i > 1; --i) {
      const size_t j = size_t(rng() % i);
      std::swap(v[i - 1], v[j]);
    }
  };
  shuffle(pos);
  shuffle(neg);
  std::vector<int> fold(size_t(n), 0);
  int next = 0;
  for (const auto* cls : {&pos, &neg})
    for (int64_t i : *cls) {
      fold[size_t(i)] = next;
      next = (next + 1) % folds;
    }
  return fold;
}

cv_candidate candidate_of(const path_point& p) {
  cv_candidate c;
  c.lambda = p.lambda, c.theta = p.theta, c.mean_nnz = p.cv_mean_nnz;
  c.fold_accuracy = p.cv_fold_accuracy;
  const double k = double(c.fold_accuracy.size());
  if (k < 2) return c;
  c.mean = std::accumulate(c.fold_accuracy.begin(), c.fold_accuracy.end(), 0.0) / k;
  double ss = 0;
  for (double a : c.fold_accuracy) ss += (a - c.mean) * (a - c.mean);
  c.se = std::sqrt(ss / (k - 1)) / std::sqrt(k);
  return c;
}

size_t one_standard_error(const std::vector<cv_candidate>& c) {
  if (c.empty()) fail("no candidates to choose from");
  for (const auto& x : c)
    if (x.fold_accuracy.size() < 2) fail("a candidate without cross-validation");
  size_t best = 0;
  for (size_t i = 1; i < c.size(); ++i)
    if (c[i].mean > c[best].mean) best = i;
  const double floor = c[best].mean - c[best].se;
  size_t pick = best;
  for (size_t i = 0; i < c.size(); ++i) {
    if (c[i].mean < floor) continue;
    const bool sparser = c[i].mean_nnz < c[pick].mean_nnz ||
                         (c[i].mean_nnz == c[pick].mean_nnz && c[i].lambda > c[pick].lambda);
    if (sparser) pick = i;
  }
  return pick;
}

selection select_by_cv(const dataset& d, const selection_options& options) {
  path_options po;
  po.fit = options.fit;
  po.lambdas = options.lambdas;
  po.folds = options.folds;
  po.fold_of = stratified_folds(d.y, options.folds, options.seed);
  po.full_fit = false;
  std::vector<double> thetas = options.thetas;
  if (thetas.empty()) thetas.push_back(options.fit.pen.theta);
  selection s;
  for (double theta : thetas) {
    po.fit.pen.theta = theta;
    for (const path_point& p : fit_path(d, po)) s.candidates.push_back(candidate_of(p));
  }
  s.chosen = one_standard_error(s.candidates);
  for (size_t i = 1; i < s.candidates.size(); ++i)
    if (s.candidates[i].mean > s.candidates[s.best].mean) s.best = i;
  return s;
}

}  // namespace merak::svm
