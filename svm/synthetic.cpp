#include "svm/synthetic.hpp"

#include <algorithm>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace merak::svm {

dataset make_synthetic(const synthetic_options& options) {
  if (options.n < 1 || options.p < 1)
    fail("synthetic data needs n >= 1 and p >= 1 (got {} x {})", options.n, options.p);
  if (!(options.density > 0 && options.density <= 1))
    fail("synthetic density must be in (0, 1] (got {})", options.density);
  rng r(options.seed, 0x5EED);
  // Planted weights on a spread of columns so that sparse rows still hit them.
  Eigen::VectorXd w = Eigen::VectorXd::Zero(options.p);
  const int64_t k = std::min(options.informative, options.p);
  for (int64_t j = 0; j < k; ++j)
    w[j * (options.p / std::max<int64_t>(k, 1))] = (j % 2 ? -1.0 : 1.0) * (0.5 + r.uniform());
  dataset d;
  d.name = "synthetic";
  d.y.resize(options.n);
  if (options.density >= 1) {
    dense_matrix x(options.n, options.p);
    for (int64_t i = 0; i < options.n; ++i) {
      for (int64_t j = 0; j < options.p; ++j) x(i, j) = r.normal();
      double m = x.row(i).dot(w) + 0.3;
      d.y[i] = (m >= 0) != (r.uniform() < options.flip) ? 1.0 : -1.0;
    }
    d.x = design_matrix(std::move(x));
    return d;
  }
  const double per_row = options.density * double(options.p);
  std::vector<Eigen::Triplet<double, int64_t>> t;
  t.reserve(size_t(per_row * double(options.n) * 1.1) + 16);
  std::vector<int64_t> cols;
  for (int64_t i = 0; i < options.n; ++i) {
    // Row length: per_row rounded randomly (at least one entry).
    int64_t len = int64_t(per_row) + (r.uniform() < per_row - double(int64_t(per_row)) ? 1 : 0);
    len = std::clamp<int64_t>(len, 1, options.p);
    cols.clear();
    for (int64_t e = 0; e < len; ++e) cols.push_back(int64_t(r.below(uint64_t(options.p))));
    std::sort(cols.begin(), cols.end());
    cols.erase(std::unique(cols.begin(), cols.end()), cols.end());
    double m = 0.3;
    for (int64_t c : cols) {
      const double v = r.normal();
      t.emplace_back(i, c, v);
      m += w[c] * v;
    }
    d.y[i] = (m >= 0) != (r.uniform() < options.flip) ? 1.0 : -1.0;
  }
  sparse_matrix x(options.n, options.p);
  x.setFromTriplets(t.begin(), t.end());
  d.x = design_matrix(std::move(x));
  return d;
}

}  // namespace merak::svm
