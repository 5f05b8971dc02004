#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "svm/path.hpp"
#include "svm/select.hpp"
#include "svm/synthetic.hpp"

using namespace merak::svm;

TEST_CASE("stratified folds keep each class's share and are shuffled by the seed",
          "[svm][select]") {
  // 37 positives, 23 negatives, clustered by class as files often are.
  Eigen::VectorXd y(60);
  for (int i = 0; i < 60; ++i) y[i] = i < 37 ? 1 : -1;
  const int K = 5;
  const auto f = stratified_folds(y, K, 7);
  REQUIRE(f.size() == 60);
  for (int k = 0; k < K; ++k) {
    int size = 0, pos = 0;
    for (int i = 0; i < 60; ++i)
      if (f[size_t(i)] == k) ++size, pos += y[i] > 0;
    CHECK(size == 12);
    CHECK(std::abs(pos - 37.0 / K) < 1.0);  // 7 or 8 positives each
  }
  CHECK(stratified_folds(y, K, 7) == f);  // the same on every run
  CHECK(stratified_folds(y, K, 8) != f);  // another seed, other folds
  std::vector<int> modulo(60);
  for (int i = 0; i < 60; ++i) modulo[size_t(i)] = i % K;
  CHECK(f != modulo);
  CHECK_THROWS_WITH(stratified_folds(y, 1, 7), Catch::Contains("at least 2"));
  CHECK_THROWS_WITH(stratified_folds(y, 61, 7), Catch::Contains("exceeds the 60 samples"));
}

TEST_CASE("the one-standard-error rule keeps the sparsest fit near the best", "[svm][select]") {
  auto cand = [](double lambda, std::vector<double> acc, double nnz) {
    path_point p;
    p.lambda = lambda;
    p.cv_fold_accuracy = std::move(acc);
    p.cv_mean_nnz = nnz;
    return candidate_of(p);
  };
  const std::vector<cv_candidate> c = {
      cand(0.3, {0.70, 0.72, 0.68, 0.70}, 2),   // sparsest, far below the best
      cand(0.1, {0.88, 0.90, 0.90, 0.88}, 5),   // within one SE of the best: chosen
      cand(0.03, {0.88, 0.92, 0.88, 0.92}, 9),  // the best mean
      cand(0.01, {0.86, 0.94, 0.90, 0.90}, 14),
  };
  CHECK(c[2].mean == Approx(0.90));
  CHECK(c[2].se == Approx(std::sqrt((4 * 0.0004) / 3.0) / 2.0));
  CHECK(one_standard_error(c) == 1);
  // With a tighter best (smaller SE), the sparser one falls outside.
  auto tight = c;
  tight[2] = cand(0.03, {0.90, 0.90, 0.90, 0.90}, 9);
  CHECK(one_standard_error(tight) == 2);
  // Equally sparse: the larger lambda.
  auto tie = c;
  tie[1].mean_nnz = 9;
  tie[1].mean = 0.90;
  CHECK(one_standard_error(tie) == 1);
  CHECK_THROWS_WITH(one_standard_error({}), Catch::Contains("no candidates"));
}

TEST_CASE("a path honours a given fold assignment", "[svm][select]") {
  synthetic_options so;
  so.n = 90, so.p = 12, so.informative = 4, so.seed = 3;
  const dataset d = make_synthetic(so);
  path_options o;
  o.fit.pen = {penalty_kind::l1, 0.01, 0};
  o.lambdas = {0.1, 0.01};
  o.folds = 3;
  o.full_fit = false;
  const auto implicit = fit_path(d, o);
  o.fold_of.resize(90);
  for (int i = 0; i < 90; ++i) o.fold_of[size_t(i)] = i % 3;
  const auto explicit_folds = fit_path(d, o);
  for (size_t i = 0; i < implicit.size(); ++i) {
    CHECK(implicit[i].cv_fold_accuracy == explicit_folds[i].cv_fold_accuracy);
    CHECK(implicit[i].cv_fold_accuracy.size() == 3);
  }
  o.fold_of = stratified_folds(d.y, 3, 1);
  const auto shuffled = fit_path(d, o);
  CHECK(shuffled[1].cv_fold_accuracy != implicit[1].cv_fold_accuracy);
  o.fold_of[0] = 3;
  CHECK_THROWS_WITH(fit_path(d, o), Catch::Contains("fold 3 is out of range for 3 folds"));
}

TEST_CASE("selection by CV picks within one SE of the best, the same on every run",
          "[svm][select]") {
  synthetic_options so;
  so.n = 150, so.p = 30, so.informative = 5, so.flip = 0.1, so.seed = 5;
  const dataset d = make_synthetic(so);
  selection_options o;
  o.fit.pen = {penalty_kind::mcp, 0.01, 3};
  o.lambdas = {0.2, 0.1, 0.05, 0.02, 0.01, 0.005};
  o.thetas = {2, 4};
  o.folds = 5;
  o.seed = 11;
  const selection s = select_by_cv(d, o);
  REQUIRE(s.candidates.size() == 12);
  const auto& pick = s.candidates[s.chosen];
  const auto& best = s.candidates[s.best];
  for (const auto& c : s.candidates) {
    CHECK(c.fold_accuracy.size() == 5);
    CHECK(c.mean <= best.mean);
  }
  CHECK(pick.mean >= best.mean - best.se);
  for (const auto& c : s.candidates)
    if (c.mean >= best.mean - best.se) CHECK(pick.mean_nnz <= c.mean_nnz);
  CHECK(s.candidates[0].theta == 2);
  CHECK(s.candidates[6].theta == 4);
  const selection again = select_by_cv(d, o);
  CHECK(again.chosen == s.chosen);
  CHECK(again.candidates[3].fold_accuracy == s.candidates[3].fold_accuracy);
}
