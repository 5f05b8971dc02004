#pragma once
// The objective F(w, b) = (1/n) sum_i max(0, 1 - y_i (x_i^T w + b)) + sum_j P(w_j)
// and what is evaluated with it: decision values, accuracy, the best bias.

#include "svm/dataset.hpp"
#include "svm/penalty.hpp"

namespace merak::svm {

// (1/n) sum_i max(0, 1 - y_i margin_i) where margin = X w + b.
double mean_hinge(const Eigen::VectorXd& y, const Eigen::VectorXd& margin);
double objective(const design_matrix& x, const Eigen::VectorXd& y, const Eigen::VectorXd& w,
                 double b, const penalty& p);
// The same with the weighted L1 penalty lambda sum_j weights_j |w_j|.
double weighted_objective(const design_matrix& x, const Eigen::VectorXd& y,
                          const Eigen::VectorXd& w, double b, double lambda,
                          const Eigen::VectorXd& weights);

// Predicted label: +1 when x^T w + b >= 0 (sign(0) is +1), else -1.
Eigen::VectorXd predict_labels(const design_matrix& x, const Eigen::VectorXd& w, double b);
// Share of labels predicted right, in [0, 1].
double accuracy(const Eigen::VectorXd& y, const Eigen::VectorXd& predicted);

// argmin_b (1/n) sum_i max(0, 1 - y_i (xw_i + b)) given xw = X w: the exact
// minimiser of the piecewise-linear convex hinge sum, found by one sorted
// sweep over its breakpoints (O(n log n)). Among equally good b the one
// nearest `current` is returned.
double best_bias(const Eigen::VectorXd& y, const Eigen::VectorXd& xw, double current);

}  // namespace merak::svm
