#include "svm/fit.hpp"

#include <Eigen/Core>

#include <chrono>

#include "core/error.hpp"
#include "svm/consensus.hpp"
#include "svm/objective.hpp"
#include "svm/standardize.hpp"

namespace merak::svm {

void set_solver_threads(int n) {
  if (n > 0) Eigen::setNbThreads(n);
}

namespace {
bool worth_densifying(const design_matrix& x) {
  const double entries = double(x.rows()) * double(x.cols());
  return x.is_sparse() && entries <= double(1 << 24) && double(x.nnz()) >= 0.5 * entries;
}
}  // namespace

bool densify_if_dense(design_matrix& x) {
  if (!worth_densifying(x)) return false;
  x = design_matrix(dense_matrix(x.sparse()));
  return true;
}

consensus_options consensus_options_of(const fit_options& options) {
  consensus_options c;
  c.rho1 = options.admm.rho1, c.rho2 = options.admm.rho2;
  c.abs_tol = options.admm.abs_tol, c.rel_tol = options.admm.rel_tol,
  c.max_iter = options.admm.max_iter;
  c.method = options.admm.method, c.dense_limit = options.admm.dense_limit;
  c.polish_bias = options.admm.polish_bias;
  c.rho_control = options.admm.rho_control;
  c.l1_start = options.admm.l1_start;
  c.nonconvex = options.nonconvex, c.lla = options.lla_opts;
  return c;
}

fit_result fit(const dataset& d, const fit_options& options) {
  options.pen.validate();
  dataset scaled_storage;
  const dataset* data = &d;
  Eigen::VectorXd scale = Eigen::VectorXd::Ones(d.cols());
  if (options.standardize) {
    scale = scaling_from_stats(compute_column_stats(d.x));
    scaled_storage = d;
    scaled_storage.x.scale_columns(scale);
    data = &scaled_storage;
  }
  if (options.workers <= 1 && worth_densifying(data->x)) {
    if (data != &scaled_storage) scaled_storage = d;
    if (densify_if_dense(scaled_storage.x)) data = &scaled_storage;
  }
  fit_result r;
  Eigen::VectorXd w;
  if (options.workers <= 1) {
    r.lla = uses_lla(options.pen, options.nonconvex, data->rows(), data->cols());
    admm_result a = r.lla ? lla_solve(data->x, data->y, options.pen, options.admm, options.lla_opts)
                          : admm_solve(data->x, data->y, options.pen, options.admm);
    w = std::move(a.w);
    r.model.b = a.b;
    r.objective = a.objective, r.iterations = a.iterations, r.converged = a.converged;
    r.time_s = a.time_s, r.method = a.method, r.rho1 = a.rho1, r.rho2 = a.rho2;
    r.cg_iterations = a.cg_iterations;
    r.screen_rounds = a.screen_rounds, r.working_set = a.working_set;
  } else {
    const consensus_options c = consensus_options_of(options);
    r.lla = uses_lla(options.pen, c.nonconvex, data->rows(), data->cols());
    consensus_result a = options.consensus_runner
                             ? options.consensus_runner(*data, options.workers, options.pen, c)
                             : consensus_fit(*data, options.workers, options.pen, c);
    w = std::move(a.w);
    r.model.b = a.b;
    r.objective = a.objective, r.iterations = a.iterations, r.converged = a.converged;
    r.time_s = a.time_s;
  }
  r.model.w = w.cwiseProduct(scale);
  r.model.pen = options.pen;
  r.model.objective = r.objective;
  r.model.iterations = r.iterations;
  return r;
}

void cv_split(int64_t n, int folds, int fold, std::vector<int64_t>& train,
              std::vector<int64_t>& test) {
  if (folds < 2) fail("--folds must be at least 2 (got {})", folds);
  if (folds > n) fail("--folds {} exceeds the {} samples", folds, n);
  if (fold < 0 || fold >= folds) fail("fold {} is out of range for {} folds", fold, folds);
  train.clear(), test.clear();
  for (int64_t i = 0; i < n; ++i) (i % folds == fold ? test : train).push_back(i);
}

cv_result cross_validate(const dataset& d, int folds, const fit_options& options) {
  const int64_t n = d.rows();
  if (folds < 2) fail("--folds must be at least 2 (got {})", folds);
  if (folds > n) fail("--folds {} exceeds the {} samples", folds, n);
  fit_options fo = options;
  fo.nonconvex = resolve_nonconvex(options.nonconvex, n, d.cols(), options.pen.kind);
  cv_result cv;
  int64_t right = 0;
  for (int f = 0; f < folds; ++f) {
    std::vector<int64_t> train, test;
    cv_split(n, folds, f, train, test);
    dataset tr = d.select_rows(train), te = d.select_rows(test);
    fit_result r = fit(tr, fo);
    Eigen::VectorXd pred = predict_labels(te.x, r.model.w, r.model.b);
    const double acc = accuracy(te.y, pred);
    right += int64_t(std::llround(acc * double(te.rows())));
    cv.fold_accuracy.push_back(acc);
    cv.mean_nnz += double(r.model.nnz()) / folds;
    cv.mean_objective += r.objective / folds;
    cv.mean_iterations += double(r.iterations) / folds;
    cv.time_s += r.time_s;
  }
  cv.accuracy = double(right) / double(n);
  return cv;
}

}  // namespace merak::svm
