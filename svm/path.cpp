#include "svm/path.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/error.hpp"
#include "svm/local_path_backend.hpp"

namespace merak::svm {
namespace {

// The walk of one grid over one backend, and the CV sums it keeps per
// penalty until all folds are scored.
class path_driver {
 public:
  path_driver(const std::vector<penalty>& penalties, const path_schedule& schedule,
              path_backend& backend, const std::function<void(size_t, const path_point&)>& on_point)
      : penalties_(penalties),
        schedule_(schedule),
        backend_(backend),
        on_point_(on_point),
        points_(penalties.size()),
        right_(penalties.size(), 0),
        held_out_(penalties.size(), 0) {
    for (size_t i = 0; i < penalties.size(); ++i)
      points_[i].lambda = penalties[i].lambda, points_[i].theta = penalties[i].theta;
  }

  std::vector<path_point> run() {
    if (schedule_.warm)
      walk_warm();
    else
      walk_cold();
    return std::move(points_);
  }

 private:
  // Each selection walks the grid: every fold's training rows, then all rows.
  void walk_warm() {
    for (int fold = 0; fold < schedule_.folds; ++fold) {
      backend_.select_rows(schedule_.folds, fold);
      for (size_t i = 0; i < penalties_.size(); ++i)
        naming_lambda(i, [&] { fit_fold(i, fold, true); });
    }
    if (!schedule_.full_fit) {
      for (size_t i = 0; i < penalties_.size(); ++i) hand_out(i);
      return;
    }
    backend_.select_rows(0, 0);
    for (size_t i = 0; i < penalties_.size(); ++i) {
      naming_lambda(i, [&] { fit_all_rows(i, true); });
      hand_out(i);
    }
  }

  // One penalty after the other, each finished (its folds, then its fit on
  // all rows) before the next; every fit cold on a fresh selection.
  void walk_cold() {
    for (size_t i = 0; i < penalties_.size(); ++i) {
      naming_lambda(i, [&] {
        for (int fold = 0; fold < schedule_.folds; ++fold) {
          backend_.select_rows(schedule_.folds, fold);
          fit_fold(i, fold, false);
        }
        if (schedule_.full_fit) {
          backend_.select_rows(0, 0);
          fit_all_rows(i, false);
        }
      });
      hand_out(i);
    }
  }

  // Fits penalties[i] on the selected fold's training rows and adds its held-out
  // score to point i's CV fields (pooled once the last fold is in).
  void fit_fold(size_t i, int fold, bool warm) {
    const path_fit fit = backend_.fit(penalties_[i], warm);
    const held_out_score score = backend_.score_held_out();
    if (score.samples < 1) fail("fold {} of {} holds out no samples", fold, schedule_.folds);
    const int folds = schedule_.folds;
    path_point& point = points_[i];
    point.lla = fit.lla;
    point.cv_fold_accuracy.push_back(double(score.right) / double(score.samples));
    right_[i] += score.right, held_out_[i] += score.samples;
    point.cv_mean_nnz += double(score.nnz) / folds;
    point.cv_mean_iterations += double(fit.iterations) / folds;
    point.cv_time_s += fit.time_s + score.time_s;
    if (int(point.cv_fold_accuracy.size()) == folds)
      point.cv_accuracy = double(right_[i]) / double(held_out_[i]);
  }

  void fit_all_rows(size_t i, bool warm) {
    const path_fit fit = backend_.fit(penalties_[i], warm);
    path_point& point = points_[i];
    point.objective = fit.objective, point.iterations = fit.iterations;
    point.converged = fit.converged, point.nnz = fit.nnz;
    point.accuracy = fit.accuracy, point.time_s = fit.time_s, point.lla = fit.lla;
  }

  void hand_out(size_t i) {
    if (on_point_) on_point_(i, points_[i]);
  }

  // Runs fn for penalty i; with more than one penalty an error names lambda.
  void naming_lambda(size_t i, const std::function<void()>& fn) const {
    if (penalties_.size() == 1) return fn();
    try {
      fn();
    } catch (const std::exception& e) {
      fail("lambda {}: {}", penalties_[i].lambda, e.what());
    }
  }

  const std::vector<penalty>& penalties_;
  const path_schedule& schedule_;
  path_backend& backend_;
  const std::function<void(size_t, const path_point&)>& on_point_;
  std::vector<path_point> points_;
  std::vector<int64_t> right_, held_out_;  // per penalty, summed over the folds scored
};

// Fails unless fold_of (or i mod folds) gives every fold both a training
// and a held-out part.
void check_folds(int64_t n, int folds, const std::vector<int>& fold_of) {
  if (folds < 2) fail("--folds must be at least 2 (got {})", folds);
  if (folds > n) fail("--folds {} exceeds the {} samples", folds, n);
  if (fold_of.empty()) return;
  if (int64_t(fold_of.size()) != n)
    fail("fold assignment has {} entries for {} samples", fold_of.size(), n);
  std::vector<int64_t> held_out(size_t(folds), 0);
  for (int f : fold_of) {
    if (f < 0 || f >= folds) fail("fold {} is out of range for {} folds", f, folds);
    ++held_out[size_t(f)];
  }
  for (int f = 0; f < folds; ++f)
    if (held_out[size_t(f)] == 0 || held_out[size_t(f)] == n)
      fail("fold {} of {} holds no samples", f, folds);
}

}  // namespace

std::vector<path_point> fit_path(const std::vector<penalty>& penalties,
                                 const path_schedule& schedule, path_backend& backend,
                                 const std::function<void(size_t, const path_point&)>& on_point) {
  if (penalties.empty()) fail("no lambda to fit");
  if (schedule.folds != 0 && schedule.folds < 2)
    fail("--folds must be at least 2 (got {})", schedule.folds);
  if (!schedule.full_fit && schedule.folds < 2) fail("--cv-only needs --folds F (F >= 2)");
  return path_driver(penalties, schedule, backend, on_point).run();
}

std::vector<penalty> path_penalties(const path_options& options) {
  std::vector<double> grid = options.lambdas;
  if (grid.empty()) fail("--lambdas: the grid is empty");
  for (double l : grid)
    if (!(l > 0) || !std::isfinite(l)) fail("--lambdas: {} is not a positive number", l);
  std::sort(grid.begin(), grid.end(), std::greater<>());
  penalty first = options.fit.pen;
  first.lambda = grid.front();
  first.validate();
  std::vector<penalty> penalties;
  for (double l : grid) {
    penalty at = options.fit.pen;
    at.lambda = l;
    if (options.theta_per_lambda) at.theta = options.fit.pen.theta * l;
    try {
      at.validate();
    } catch (const std::exception& e) {
      fail("--theta-per-lambda: at lambda {}: {}", l, e.what());
    }
    penalties.push_back(at);
  }
  return penalties;
}

std::vector<path_point> fit_path(const dataset& d, const path_options& options,
                                 const std::function<void(const path_point&)>& on_point) {
  // The folds and the fit on all rows use the method the whole data calls for.
  fit_options fit = options.fit;
  fit.nonconvex =
      resolve_nonconvex(options.fit.nonconvex, d.rows(), d.cols(), options.fit.pen.kind);
  const std::vector<penalty> penalties = path_penalties(options);
  if (!options.full_fit && options.folds < 2) fail("--cv-only needs --folds F (F >= 2)");
  if (options.fit.workers > 1)
    fail("svm path runs on one machine (--workers {} given)", options.fit.workers);
  if (options.folds != 0) check_folds(d.rows(), options.folds, options.fold_of);
  local_path_backend backend(d, fit, options.fold_of);
  const path_schedule schedule{options.folds, options.warm, options.full_fit};
  return fit_path(penalties, schedule, backend, [&](size_t, const path_point& point) {
    if (on_point) on_point(point);
  });
}

}  // namespace merak::svm
