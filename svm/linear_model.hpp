#pragma once
// A fitted linear classifier: predict +1 when x^T w + b >= 0 (sign(0) is +1).
// Weights are in the units of the data as read (standardisation undone).
// File formats: docs/svm-model-format.md.

#include <string>

#include <Eigen/Core>

#include "svm/penalty.hpp"

namespace merak::svm {

struct linear_model {
  Eigen::VectorXd w;  // (p)
  double b = 0;
  penalty pen;
  // Fit summary (informational; written into the model files).
  double objective = 0;
  int iterations = 0;

  int64_t features() const { return w.size(); }
  int64_t nnz() const { return (w.array() != 0).count(); }
};

// LIBLINEAR-like text (header lines, then `w` and one weight per line, the
// bias last) and JSON. Writes atomically (temporary file + rename); throws
// merak::error naming the file on I/O failure.
void write_model_text(const linear_model& m, const std::string& path);
void write_model_json(const linear_model& m, const std::string& path);
// Writes JSON when path ends in .json, text otherwise.
void write_model(const linear_model& m, const std::string& path);
// Reads either format (JSON when the file starts with '{'); errors name the
// file and the line or key that is wrong.
linear_model read_model(const std::string& path);

}  // namespace merak::svm
