#pragma once
// A labelled data set: X (n x p) and labels y in {-1, +1}.

#include <string>
#include <vector>

#include "svm/design_matrix.hpp"

namespace merak::svm {

struct dataset {
  design_matrix x;    // (n, p)
  Eigen::VectorXd y;  // (n), each -1 or +1
  std::string name;   // file name or a description, for messages

  int64_t rows() const { return x.rows(); }
  int64_t cols() const { return x.cols(); }
  dataset select_rows(const std::vector<int64_t>& rows) const;
};

}  // namespace merak::svm
