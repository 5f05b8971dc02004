#pragma once
// Choosing lambda (and theta) by cross-validation (`merak svm train
// --select cv`): stratified, shuffled K-fold CV over a grid, then the
// one-standard-error rule of Breiman et al. (1984) and Hastie, Tibshirani &
// Friedman: among the candidates whose mean CV accuracy is within one
// standard error of the best one's, the most parsimonious (fewest mean
// non-zeros, then the largest lambda) is chosen. docs/svm.md.

#include <cstdint>
#include <vector>

#include <Eigen/Core>

#include "svm/path.hpp"

namespace merak::svm {

// Fold of each sample: every class's samples shuffled (seeded, the same on
// every machine) and dealt to folds 0, 1, ..., K-1 in turn, the second
// class continuing where the first left off, so every fold holds each
// class's share within one sample and fold sizes differ by at most one.
// Throws merak::error for folds < 2 or folds > n.
std::vector<int> stratified_folds(const Eigen::VectorXd& y, int folds, uint64_t seed);

struct cv_candidate {
  double lambda = 0, theta = 0;
  double mean = 0;  // mean of the folds' held-out accuracies
  double se = 0;    // their standard error: sample sd / sqrt(K)
  double mean_nnz = 0;
  std::vector<double> fold_accuracy;
};

// A candidate from a cross-validated path point.
cv_candidate candidate_of(const path_point& p);

// The index of the candidate the one-standard-error rule picks. Throws
// merak::error for no candidates or candidates without fold accuracies.
size_t one_standard_error(const std::vector<cv_candidate>& c);

struct selection_options {
  fit_options fit;              // penalty kind and solver; lambda and theta come from the grids
  std::vector<double> lambdas;  // walked from the largest down, warm-started
  std::vector<double> thetas;   // nonconvex penalties: one path per theta; empty: fit.pen.theta
  int folds = 5;
  uint64_t seed = 1;
};

struct selection {
  std::vector<cv_candidate> candidates;  // every (theta, lambda), path order within a theta
  size_t chosen = 0;
  size_t best = 0;  // the highest mean accuracy
};

// Cross-validates every candidate on the same stratified folds; throws
// what fit_path throws.
selection select_by_cv(const dataset& d, const selection_options& options);

}  // namespace merak::svm
