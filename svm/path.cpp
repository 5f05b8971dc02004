#include "svm/path.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/error.hpp"
#include "svm/lla.hpp"
#include "svm/objective.hpp"
#include "svm/standardize.hpp"

namespace merak::svm {
namespace {

// The fits of one data set along the grid (pens: path_penalties(o)),
// warm-started; visit(i, result, scale) sees lambda i's result on the
// scaled data and the column scaling.
void walk(const dataset& d, const path_options& o, const std::vector<penalty>& pens,
          const std::function<void(size_t, const admm_result&, const Eigen::VectorXd&)>& visit) {
  dataset scaled = d;
  Eigen::VectorXd scale = Eigen::VectorXd::Ones(d.cols());
  if (o.fit.standardize) {
    scale = scaling_from_stats(compute_column_stats(d.x));
    scaled.x.scale_columns(scale);
  }
  densify_if_dense(scaled.x);
  admm_state state;
  for (size_t i = 0; i < pens.size(); ++i) {
    const penalty& pen = pens[i];
    const admm_state* start = o.warm && !state.empty() ? &state : nullptr;
    admm_result r = uses_lla(pen, o.fit.nonconvex, scaled.rows(), scaled.cols())
                        ? lla_solve(scaled.x, scaled.y, pen, o.fit.admm, o.fit.lla_opts, start)
                        : admm_solve(scaled.x, scaled.y, pen, o.fit.admm, {}, start);
    visit(i, r, scale);
    state = std::move(r.state);
  }
}

}  // namespace

std::vector<penalty> path_penalties(const path_options& o) {
  std::vector<double> grid = o.lambdas;
  if (grid.empty()) fail("--lambdas: the grid is empty");
  for (double l : grid)
    if (!(l > 0) || !std::isfinite(l)) fail("--lambdas: {} is not a positive number", l);
  std::sort(grid.begin(), grid.end(), std::greater<>());
  penalty first = o.fit.pen;
  first.lambda = grid.front();
  first.validate();
  std::vector<penalty> pens;
  for (double l : grid) {
    penalty at = o.fit.pen;
    at.lambda = l;
    if (o.theta_per_lambda) at.theta = o.fit.pen.theta * l;
    try {
      at.validate();
    } catch (const std::exception& e) {
      fail("--theta-per-lambda: at lambda {}: {}", l, e.what());
    }
    pens.push_back(at);
  }
  return pens;
}

std::vector<path_point> fit_path(const dataset& d, const path_options& po,
                                 const std::function<void(const path_point&)>& on_point) {
  // The folds and the fit on all rows use the method the whole data calls for.
  path_options o = po;
  o.fit.nonconvex = resolve_nonconvex(po.fit.nonconvex, d.rows(), d.cols(), po.fit.pen.kind);
  const std::vector<penalty> pens = path_penalties(o);
  if (!o.full_fit && o.folds < 2) fail("--cv-only needs --folds F (F >= 2)");
  if (o.fit.workers > 1) fail("svm path runs on one machine (--workers {} given)", o.fit.workers);
  std::vector<path_point> pts(pens.size());
  const bool lla = uses_lla(pens.front(), o.fit.nonconvex, d.rows(), d.cols());
  for (size_t i = 0; i < pts.size(); ++i)
    pts[i].lambda = pens[i].lambda, pts[i].theta = pens[i].theta, pts[i].lla = lla;

  if (o.folds != 0) {
    const int64_t n = d.rows();
    if (o.folds < 2) fail("--folds must be at least 2 (got {})", o.folds);
    if (o.folds > n) fail("--folds {} exceeds the {} samples", o.folds, n);
    if (!o.fold_of.empty()) {
      if (int64_t(o.fold_of.size()) != n)
        fail("fold assignment has {} entries for {} samples", o.fold_of.size(), n);
      for (int f : o.fold_of)
        if (f < 0 || f >= o.folds) fail("fold {} is out of range for {} folds", f, o.folds);
    }
    auto fold = [&](int64_t i) { return o.fold_of.empty() ? int(i % o.folds) : o.fold_of[i]; };
    std::vector<int64_t> right(pts.size(), 0);
    for (int f = 0; f < o.folds; ++f) {
      std::vector<int64_t> train, test;
      for (int64_t i = 0; i < n; ++i) (fold(i) == f ? test : train).push_back(i);
      if (test.empty() || train.empty()) fail("fold {} of {} holds no samples", f, o.folds);
      const dataset tr = d.select_rows(train), te = d.select_rows(test);
      walk(tr, o, pens, [&](size_t i, const admm_result& r, const Eigen::VectorXd& scale) {
        const Eigen::VectorXd w = r.w.cwiseProduct(scale);
        const Eigen::VectorXd pred = predict_labels(te.x, w, r.b);
        const double acc = accuracy(te.y, pred);
        pts[i].cv_fold_accuracy.push_back(acc);
        right[i] += int64_t(std::llround(acc * double(te.rows())));
        pts[i].cv_mean_nnz += double(r.nnz()) / o.folds;
        pts[i].cv_time_s += r.time_s;
      });
    }
    for (size_t i = 0; i < pts.size(); ++i) pts[i].cv_accuracy = double(right[i]) / double(n);
  }
  if (!o.full_fit) {
    if (on_point)
      for (const path_point& pt : pts) on_point(pt);
    return pts;
  }
  walk(d, o, pens, [&](size_t i, const admm_result& r, const Eigen::VectorXd& scale) {
    path_point& pt = pts[i];
    pt.objective = r.objective, pt.iterations = r.iterations, pt.converged = r.converged;
    pt.nnz = r.nnz(), pt.time_s = r.time_s;
    pt.accuracy = accuracy(d.y, predict_labels(d.x, r.w.cwiseProduct(scale), r.b));
    if (on_point) on_point(pt);
  });
  return pts;
}

}  // namespace merak::svm
