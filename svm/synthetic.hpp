#pragma once
// Synthetic two-class data for benchmarks: a planted sparse weight vector,
// features N(0, 1) at the given density (CSR when density < 1), labels
// sign(x^T w + 0.3) flipped with probability `flip`. Deterministic in seed.
// Cost O(n p density), so large sparse problems are quick to make.

#include <cstdint>

#include "svm/dataset.hpp"

namespace merak::svm {

struct synthetic_options {
  int64_t n = 1000, p = 100;
  double density = 1.0;
  int64_t informative = 10;  // non-zero planted weights (the first ones)
  double flip = 0.05;
  uint64_t seed = 1;
};

dataset make_synthetic(const synthetic_options& options);

}  // namespace merak::svm
