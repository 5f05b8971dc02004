// The path driver (svm::fit_path over a path_backend) against fits made
// without it: cross_validate and svm::fit at each lambda, a second backend
// that fits every selection with svm::fit, and the order of the backend
// calls each schedule promises (actors/svm_remote_backend.cpp relies on it).
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include "svm/fit.hpp"
#include "svm/local_path_backend.hpp"
#include "svm/objective.hpp"
#include "svm/path.hpp"
#include "svm/select.hpp"
#include "tests/svm/svm_test_util.hpp"

using namespace merak::svm;

namespace {

path_options small_grid(penalty_kind kind) {
  path_options o;
  o.fit.pen = {kind, 0.01, default_theta(kind)};
  o.fit.admm.max_iter = 20000;
  o.lambdas = {0.1, 0.03, 0.01, 0.003};
  return o;
}

// A second backend: every fit a cold svm::fit of the selected rows (which
// standardises them itself), scored with the model in the data's units.
class fit_per_selection_backend final : public path_backend {
 public:
  fit_per_selection_backend(const dataset& d, const fit_options& options)
      : data_(d), options_(options) {}

  void select_rows(int folds, int fold) override {
    folds_ = folds;
    if (folds == 0) {
      train_ = data_;
      return;
    }
    std::vector<int64_t> train, test;
    cv_split(data_.rows(), folds, fold, train, test);
    train_ = data_.select_rows(train), test_ = data_.select_rows(test);
  }

  path_fit fit(const penalty& pen, bool) override {
    fit_options options = options_;
    options.pen = pen;
    last_ = merak::svm::fit(train_, options);
    path_fit out;
    out.objective = last_.objective, out.iterations = last_.iterations;
    out.converged = last_.converged, out.nnz = last_.model.nnz(), out.lla = last_.lla;
    out.time_s = last_.time_s;
    if (folds_ == 0)
      out.accuracy = accuracy(data_.y, predict_labels(data_.x, last_.model.w, last_.model.b));
    return out;
  }

  held_out_score score_held_out() override {
    const Eigen::VectorXd predicted = predict_labels(test_.x, last_.model.w, last_.model.b);
    return {(test_.y.array() == predicted.array()).count(), test_.rows(), last_.model.nnz(), 0};
  }

 private:
  const dataset& data_;
  fit_options options_;
  int folds_ = 0;
  dataset train_, test_;
  fit_result last_;
};

// Forwards to a backend and writes down each call: "select 3/0",
// "fit 0.1 warm", "fit 0.1 cold", "score".
class recording_backend final : public path_backend {
 public:
  explicit recording_backend(path_backend& inner) : inner_(inner) {}
  void select_rows(int folds, int fold) override {
    calls.push_back("select " + std::to_string(folds) + "/" + std::to_string(fold));
    inner_.select_rows(folds, fold);
  }
  path_fit fit(const penalty& pen, bool warm) override {
    calls.push_back(fmt::format("fit {} {}", pen.lambda, warm ? "warm" : "cold"));
    return inner_.fit(pen, warm);
  }
  held_out_score score_held_out() override {
    calls.push_back("score");
    return inner_.score_held_out();
  }
  std::vector<std::string> calls;

 private:
  path_backend& inner_;
};

}  // namespace

TEST_CASE("the cold path's CV is cross_validate's and its fits are svm::fit's at each lambda",
          "[svm][path]") {
  dataset d = test::synthetic({.n = 90, .p = 30, .informative = 4, .seed = 21});
  for (auto kind : {penalty_kind::l1, penalty_kind::mcp}) {
    path_options o = small_grid(kind);
    o.folds = 3;
    o.warm = false;
    const std::vector<path_point> points = fit_path(d, o);
    REQUIRE(points.size() == 4);
    std::vector<cv_candidate> from_path, from_cross_validate;
    for (const path_point& p : points) {
      INFO(penalty_name(kind) << " lambda " << p.lambda);
      fit_options f = o.fit;
      f.pen.lambda = p.lambda;
      const cv_result cv = cross_validate(d, 3, f);
      CHECK(p.cv_accuracy == cv.accuracy);
      CHECK(p.cv_fold_accuracy == cv.fold_accuracy);
      CHECK(p.cv_mean_nnz == cv.mean_nnz);
      CHECK(p.cv_mean_iterations == cv.mean_iterations);
      const fit_result at = fit(d, f);
      CHECK(p.iterations == at.iterations);
      CHECK(p.nnz == at.model.nnz());
      CHECK(p.objective == Approx(at.objective).epsilon(1e-12));
      from_path.push_back(candidate_of(p));
      path_point q = p;
      q.cv_fold_accuracy = cv.fold_accuracy, q.cv_mean_nnz = cv.mean_nnz;
      from_cross_validate.push_back(candidate_of(q));
    }
    CHECK(one_standard_error(from_path) == one_standard_error(from_cross_validate));
  }
}

TEST_CASE("two backends driven over the same schedule give the same path", "[svm][path]") {
  dataset d = test::synthetic({.n = 60, .p = 12, .informative = 3, .seed = 22});
  path_options o = small_grid(penalty_kind::scad);
  o.fit.nonconvex = nonconvex_method::direct;
  const std::vector<penalty> penalties = path_penalties(o);
  const path_schedule cold{3, false, true};
  local_path_backend local(d, o.fit);
  fit_per_selection_backend per_selection(d, o.fit);
  std::vector<std::pair<size_t, double>> seen;
  const auto a = fit_path(penalties, cold, local,
                          [&](size_t i, const path_point& p) { seen.emplace_back(i, p.lambda); });
  const auto b = fit_path(penalties, cold, per_selection);
  CHECK(seen == std::vector<std::pair<size_t, double>>{{0, 0.1}, {1, 0.03}, {2, 0.01}, {3, 0.003}});
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("lambda " << a[i].lambda);
    CHECK(a[i].lambda == b[i].lambda);
    CHECK(a[i].iterations == b[i].iterations);
    CHECK(a[i].objective == Approx(b[i].objective).epsilon(1e-12));
    CHECK(a[i].accuracy == b[i].accuracy);
    CHECK(a[i].cv_accuracy == b[i].cv_accuracy);
    CHECK(a[i].cv_fold_accuracy == b[i].cv_fold_accuracy);
    CHECK(a[i].cv_mean_nnz == b[i].cv_mean_nnz);
  }
  // The warm path over the first backend is the dataset's fit_path.
  const auto warm = fit_path(penalties, {3, true, true}, local);
  o.folds = 3;
  const auto reference = fit_path(d, o);
  REQUIRE(warm.size() == reference.size());
  for (size_t i = 0; i < warm.size(); ++i) {
    CHECK(warm[i].objective == reference[i].objective);
    CHECK(warm[i].cv_accuracy == reference[i].cv_accuracy);
  }
}

TEST_CASE("each schedule calls the backend in the order it promises", "[svm][path]") {
  dataset d = test::synthetic({.n = 40, .p = 6, .seed = 23});
  path_options o = small_grid(penalty_kind::l1);
  o.lambdas = {0.1, 0.01};
  const std::vector<penalty> penalties = path_penalties(o);
  local_path_backend local(d, o.fit);
  recording_backend recorder(local);
  std::vector<std::string> handed_out_after;
  const auto on_point = [&](size_t i, const path_point&) {
    handed_out_after.push_back(std::to_string(i) + " after " + recorder.calls.back());
  };

  // Warm: each fold's training rows walk the grid, then all rows do; a
  // point is handed out right after its fit on all rows.
  fit_path(penalties, {2, true, true}, recorder, on_point);
  CHECK(recorder.calls ==
        std::vector<std::string>{"select 2/0", "fit 0.1 warm", "score", "fit 0.01 warm", "score",
                                 "select 2/1", "fit 0.1 warm", "score", "fit 0.01 warm", "score",
                                 "select 0/0", "fit 0.1 warm", "fit 0.01 warm"});
  CHECK(handed_out_after ==
        std::vector<std::string>{"0 after fit 0.1 warm", "1 after fit 0.01 warm"});

  // Cold: each penalty finished (its folds, then all rows) before the next.
  recorder.calls.clear(), handed_out_after.clear();
  fit_path(penalties, {2, false, true}, recorder, on_point);
  CHECK(recorder.calls ==
        std::vector<std::string>{"select 2/0", "fit 0.1 cold", "score", "select 2/1",
                                 "fit 0.1 cold", "score", "select 0/0", "fit 0.1 cold",
                                 "select 2/0", "fit 0.01 cold", "score", "select 2/1",
                                 "fit 0.01 cold", "score", "select 0/0", "fit 0.01 cold"});
  CHECK(handed_out_after ==
        std::vector<std::string>{"0 after fit 0.1 cold", "1 after fit 0.01 cold"});

  // CV only, warm: the points once every fold is scored.
  recorder.calls.clear(), handed_out_after.clear();
  const auto cv_only = fit_path(penalties, {2, true, false}, recorder, on_point);
  CHECK(recorder.calls.size() == 10);
  CHECK(handed_out_after == std::vector<std::string>{"0 after score", "1 after score"});
  CHECK(cv_only[0].iterations == 0);
  CHECK(cv_only[1].cv_fold_accuracy.size() == 2);

  CHECK_THROWS_WITH(fit_path(penalties, {1, true, true}, recorder),
                    Catch::Contains("--folds must be"));
  CHECK_THROWS_WITH(fit_path(penalties, {0, true, false}, recorder), Catch::Contains("--cv-only"));
  CHECK_THROWS_WITH(fit_path(std::vector<penalty>{}, {0, true, true}, recorder),
                    Catch::Contains("no lambda"));
}
