#include <catch2/catch.hpp>

#include "svm/fit.hpp"
#include "svm/path.hpp"
#include "tests/svm/svm_test_util.hpp"

using namespace merak::svm;

namespace {

path_options grid(penalty_kind kind) {
  path_options o;
  o.fit.pen = {kind, 0.01, default_theta(kind)};
  o.fit.admm.max_iter = 20000;
  o.lambdas = {0.003, 0.1, 0.03, 0.01};  // walked from the largest down
  return o;
}

}  // namespace

TEST_CASE("a warm-started path matches cold fits with fewer iterations", "[svm][path]") {
  // n < p (the Woodbury w-step), as golub and westbc.
  dataset d = test::synthetic({.n = 40, .p = 200, .informative = 4, .seed = 11});
  for (auto kind : {penalty_kind::l1, penalty_kind::mcp}) {
    path_options o = grid(kind);
    const auto warm = fit_path(d, o);
    o.warm = false;
    const auto cold = fit_path(d, o);
    REQUIRE(warm.size() == 4);
    int it_warm = 0, it_cold = 0;
    for (size_t i = 0; i < warm.size(); ++i) {
      INFO(penalty_name(kind) << " lambda " << warm[i].lambda);
      CHECK(warm[i].lambda == cold[i].lambda);
      if (i > 0) CHECK(warm[i].lambda < warm[i - 1].lambda);
      CHECK(warm[i].converged);
      // At the default tolerance a cold fit stops up to ~1% above the
      // optimum (L1) or at another stationary point (MCP); the warm path
      // must be no worse.
      CHECK(warm[i].objective <= cold[i].objective * (kind == penalty_kind::l1 ? 1.001 : 1.01));
      if (kind == penalty_kind::l1)
        CHECK(warm[i].objective == Approx(cold[i].objective).epsilon(0.02));
      it_warm += warm[i].iterations, it_cold += cold[i].iterations;
    }
    INFO("iterations warm " << it_warm << " cold " << it_cold);
    CHECK(it_warm < it_cold);
  }
}

TEST_CASE("the path's cross-validation agrees with cross_validate at each lambda", "[svm][path]") {
  dataset d = test::synthetic({.n = 90, .p = 12, .seed = 12});
  path_options o = grid(penalty_kind::l1);
  o.folds = 3;
  std::vector<double> seen;
  const auto pts = fit_path(d, o, [&](const path_point& p) { seen.push_back(p.lambda); });
  CHECK(seen == std::vector<double>{0.1, 0.03, 0.01, 0.003});
  for (const auto& p : pts) {
    fit_options f = o.fit;
    f.pen.lambda = p.lambda;
    const cv_result cv = cross_validate(d, 3, f);
    INFO("lambda " << p.lambda);
    CHECK(std::abs(p.cv_accuracy - cv.accuracy) <= 1.0 / 90 + 1e-12);
    CHECK(std::abs(p.cv_mean_nnz - cv.mean_nnz) <= 1.0);
  }
}

TEST_CASE("path errors name the flag", "[svm][path]") {
  dataset d = test::synthetic({.n = 20, .p = 4});
  path_options o = grid(penalty_kind::l1);
  o.lambdas = {};
  CHECK_THROWS_WITH(fit_path(d, o), Catch::Contains("--lambdas: the grid is empty"));
  o.lambdas = {0.1, -1};
  CHECK_THROWS_WITH(fit_path(d, o), Catch::Contains("--lambdas: -1 is not a positive number"));
  o.lambdas = {0.1};
  o.folds = 1;
  CHECK_THROWS_WITH(fit_path(d, o), Catch::Contains("--folds must be at least 2"));
  o.folds = 0;
  o.fit.workers = 2;
  CHECK_THROWS_WITH(fit_path(d, o), Catch::Contains("--workers 2"));
}

TEST_CASE("theta_per_lambda fits each lambda with theta times lambda", "[svm][path]") {
  dataset d = test::synthetic({.n = 40, .p = 120, .informative = 4, .seed = 13});
  path_options o = grid(penalty_kind::capped_l1);
  o.fit.pen.theta = 2;  // the cap at 2 lambda
  o.theta_per_lambda = true;
  o.warm = false;  // cold fits: comparable with single fits
  const auto pts = fit_path(d, o);
  REQUIRE(pts.size() == 4);
  bool differs = false;
  for (const auto& p : pts) {
    INFO("lambda " << p.lambda);
    CHECK(p.theta == Approx(2 * p.lambda));
    fit_options f = o.fit;
    f.pen.lambda = p.lambda, f.pen.theta = 2 * p.lambda;
    const fit_result at = fit(d, f);
    CHECK(p.objective == Approx(at.objective).epsilon(1e-9));
    CHECK(p.nnz == at.model.nnz());
    // A fixed cap of 2 (the flag ignored) is another problem.
    f.pen.theta = 2;
    differs = differs || std::abs(fit(d, f).objective - p.objective) > 1e-3 * p.objective;
  }
  CHECK(differs);
  // Each lambda's theta is validated: SCAD needs a > 2 at every lambda.
  o.fit.pen = {penalty_kind::scad, 0.01, 30};
  CHECK_THROWS_WITH(fit_path(d, o), Catch::Contains("--theta-per-lambda: at lambda 0.03: "
                                                    "--theta (SCAD a) must be > 2 (got 0."));
}

TEST_CASE("full_fit false gives the same CV fields without the fit on all the data",
          "[svm][path]") {
  dataset d = test::synthetic({.n = 60, .p = 80, .informative = 4, .seed = 14});
  path_options o = grid(penalty_kind::mcp);
  o.folds = 3;
  const auto full = fit_path(d, o);
  o.full_fit = false;
  std::vector<double> seen;
  const auto cv = fit_path(d, o, [&](const path_point& p) { seen.push_back(p.lambda); });
  CHECK(seen == std::vector<double>{0.1, 0.03, 0.01, 0.003});
  REQUIRE(cv.size() == full.size());
  for (size_t i = 0; i < cv.size(); ++i) {
    INFO("lambda " << cv[i].lambda);
    CHECK(cv[i].cv_accuracy == full[i].cv_accuracy);
    CHECK(cv[i].cv_mean_nnz == full[i].cv_mean_nnz);
    // No fit on all the data: its fields stay at their defaults.
    CHECK(full[i].iterations > 0);
    CHECK(cv[i].iterations == 0);
    CHECK(cv[i].nnz == 0);
  }
  o.folds = 0;
  CHECK_THROWS_WITH(fit_path(d, o), Catch::Contains("--cv-only needs --folds"));
}

TEST_CASE("the automatic nonconvex method is LLA on wide data and the direct ADMM otherwise",
          "[svm][fit][path]") {
  const penalty mcp{penalty_kind::mcp, 0.03, 3};
  for (bool wide : {false, true}) {
    dataset d = wide ? test::synthetic({.n = 30, .p = 200, .informative = 4, .seed = 5})
                     : test::synthetic({.n = 120, .p = 20, .informative = 4, .seed = 5});
    fit_options f;
    f.pen = mcp;
    const fit_result automatic = fit(d, f);
    f.nonconvex = nonconvex_method::lla;
    const fit_result lla = fit(d, f);
    f.nonconvex = nonconvex_method::direct;
    const fit_result direct = fit(d, f);
    const fit_result& expected = wide ? lla : direct;
    INFO((wide ? "wide" : "tall") << ": lla " << lla.objective << " (" << lla.iterations
                                  << " its), direct " << direct.objective << " ("
                                  << direct.iterations << " its)");
    CHECK(automatic.lla == wide);
    CHECK(lla.lla);
    CHECK(!direct.lla);
    // The two methods differ here, so the check can tell them apart.
    CHECK(lla.iterations != direct.iterations);
    CHECK(automatic.iterations == expected.iterations);
    CHECK(automatic.objective == expected.objective);
    // The path decides per fit in the same way.
    path_options o;
    o.fit.pen = mcp;
    o.lambdas = {mcp.lambda};
    CHECK(fit_path(d, o).front().objective == expected.objective);
  }
  // 70 x 60 with 5 folds: each fold trains on 56 rows, fewer than its 60
  // features, but the method is the whole data's (direct), so that the
  // folds score what the fit on all rows uses.
  {
    dataset d = test::synthetic({.n = 70, .p = 60, .informative = 4, .seed = 6});
    fit_options f;
    f.pen = mcp;
    const cv_result automatic = cross_validate(d, 5, f);
    f.nonconvex = nonconvex_method::direct;
    const cv_result direct = cross_validate(d, 5, f);
    f.nonconvex = nonconvex_method::lla;
    const cv_result lla = cross_validate(d, 5, f);
    CHECK(lla.mean_iterations != direct.mean_iterations);
    CHECK(automatic.mean_iterations == direct.mean_iterations);
    CHECK(automatic.mean_objective == direct.mean_objective);
    path_options o;
    o.fit.pen = mcp;
    o.lambdas = {mcp.lambda};
    o.folds = 5;
    const path_point pa = fit_path(d, o).front();
    o.fit.nonconvex = nonconvex_method::direct;
    const path_point pd = fit_path(d, o).front();
    CHECK(pa.cv_accuracy == pd.cv_accuracy);
    CHECK(pa.cv_mean_nnz == pd.cv_mean_nnz);
    CHECK(pa.objective == pd.objective);
  }
  CHECK(parse_nonconvex_method("auto") == nonconvex_method::automatic);
  CHECK_THROWS_WITH(parse_nonconvex_method("both"),
                    Catch::Contains("--nonconvex must be auto, lla or direct (got 'both')"));
}
