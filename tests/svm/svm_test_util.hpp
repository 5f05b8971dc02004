#pragma once
// Synthetic classification data for the svm tests: a planted sparse weight
// vector, Gaussian (dense) or random-sparse features, and labels flipped
// with a small probability so that the classes overlap.

#include <cstdint>

#include "core/rng.hpp"
#include "svm/dataset.hpp"

namespace merak::svm::test {

struct synthetic_spec {
  int64_t n = 100, p = 20;
  double density = 1.0;  // share of non-zero features (sparse when < 1)
  int64_t informative = 5;
  double flip = 0.05;
  uint64_t seed = 1;
  bool sparse = false;  // store as CSR even when density == 1
};

inline dataset synthetic(const synthetic_spec& s) {
  rng r(s.seed, 0x5A5A);
  Eigen::VectorXd w = Eigen::VectorXd::Zero(s.p);
  for (int64_t j = 0; j < std::min(s.informative, s.p); ++j)
    w[j] = (j % 2 ? -1.0 : 1.0) * (1.0 + r.uniform());
  dataset d;
  d.name = "synthetic";
  d.y.resize(s.n);
  std::vector<Eigen::Triplet<double, int64_t>> t;
  dense_matrix x = dense_matrix::Zero(s.n, s.p);
  for (int64_t i = 0; i < s.n; ++i) {
    double m = 0.3;  // a non-zero intercept
    for (int64_t j = 0; j < s.p; ++j) {
      if (s.density < 1 && r.uniform() >= s.density) continue;
      double v = r.normal();
      x(i, j) = v;
      t.emplace_back(i, j, v);
      m += w[j] * v;
    }
    double y = m >= 0 ? 1.0 : -1.0;
    if (r.uniform() < s.flip) y = -y;
    d.y[i] = y;
  }
  if (s.sparse || s.density < 1) {
    sparse_matrix sp(s.n, s.p);
    sp.setFromTriplets(t.begin(), t.end());
    d.x = design_matrix(std::move(sp));
  } else {
    d.x = design_matrix(std::move(x));
  }
  return d;
}

}  // namespace merak::svm::test
