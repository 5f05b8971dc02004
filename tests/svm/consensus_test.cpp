#include <catch2/catch.hpp>

#include "svm/admm.hpp"
#include "svm/consensus.hpp"
#include "svm/lla.hpp"
#include "svm/objective.hpp"
#include "tests/svm/stationarity.hpp"
#include "tests/svm/svm_test_util.hpp"

using namespace merak::svm;

namespace {

// Tolerances a tenth of the defaults: nonconvex ADMM settles at residuals
// of ~1e-4 here and does not reach 1e-8.
admm_options single_options() {
  admm_options o;
  o.abs_tol = 1e-6, o.rel_tol = 1e-5, o.max_iter = 20000;
  return o;
}

// Largest violation of the first-order conditions (stationarity.hpp) taken
// as stationary: 2% of lambda = 0.02 in the tests below; the ADMM stops at
// residuals of ~1e-4.
constexpr double kStationarityTol = 4e-4;
constexpr double kMarginTol = 1e-2;

consensus_options consensus_tight() {
  consensus_options o;
  o.abs_tol = 1e-6, o.rel_tol = 1e-5, o.max_iter = 20000;
  return o;
}

}  // namespace

TEST_CASE("consensus ADMM over K = 1, 2, 4, 8 matches the single-machine objective",
          "[svm][consensus]") {
  for (bool sparse : {false, true}) {
    dataset d = test::synthetic({.n = 160, .p = 24, .density = sparse ? 0.4 : 1.0, .seed = 21});
    for (auto kind : {penalty_kind::l1, penalty_kind::mcp, penalty_kind::scad}) {
      penalty pen{kind, 0.02, default_theta(kind)};
      const admm_result single = admm_solve(d.x, d.y, pen, single_options());
      for (int k : {1, 2, 4, 8}) {
        consensus_result c = consensus_fit(d, k, pen, consensus_tight());
        INFO(penalty_name(kind) << " K=" << k << " sparse=" << sparse
                                << " iterations=" << c.iterations << " single=" << single.objective
                                << " consensus=" << c.objective);
        CHECK(single.converged);
        CHECK(c.converged);
        CHECK(c.objective == Approx(objective(d.x, d.y, c.w, c.b, pen)));
        if (kind == penalty_kind::scad) {
          // SCAD may reach another stationary point than the single machine:
          // check the first-order conditions, and the objective loosely.
          const double viol = test::stationarity_violation(d, c.w, c.b, pen, kMarginTol);
          INFO("stationarity violation " << viol << " (lambda " << pen.lambda << ")");
          CHECK(viol <= kStationarityTol);
          CHECK(c.objective == Approx(single.objective).epsilon(0.02));
        } else
          CHECK(c.objective == Approx(single.objective).epsilon(1e-3));
      }
    }
  }
}

TEST_CASE("consensus LLA over K = 1, 2, 4 follows the single-machine LLA on wide data",
          "[svm][consensus][lla]") {
  // p > n: `automatic` runs LLA, as a single machine does. Its steps are
  // weighted-L1 consensus runs (convex), each continuing from the last.
  dataset d = test::synthetic({.n = 40, .p = 200, .informative = 4, .seed = 12});
  for (auto kind : {penalty_kind::mcp, penalty_kind::scad, penalty_kind::lsp}) {
    penalty pen{kind, 0.03, default_theta(kind)};
    const admm_result single = lla_solve(d.x, d.y, pen, single_options());
    consensus_options direct_o = consensus_tight();
    direct_o.nonconvex = nonconvex_method::direct;
    for (int k : {1, 2, 4}) {
      const consensus_result c = consensus_fit(d, k, pen, consensus_tight());
      const consensus_result direct = consensus_fit(d, k, pen, direct_o);
      INFO(penalty_name(kind) << " K=" << k << " single LLA " << single.objective << " ("
                              << single.iterations << " its), consensus LLA " << c.objective << " ("
                              << c.iterations << " its), consensus direct " << direct.objective);
      CHECK(c.converged);
      CHECK(c.objective == Approx(objective(d.x, d.y, c.w, c.b, pen)));
      if (kind == penalty_kind::scad) {
        // Here every K reaches 0.019035 and the single machine's LLA (with
        // working sets) another stationary point at 0.02115: check the
        // first-order conditions, and that it is no worse.
        const double viol = test::stationarity_violation(d, c.w, c.b, pen, kMarginTol);
        INFO("stationarity violation " << viol);
        CHECK(viol <= kStationarityTol);
        CHECK(c.objective <= single.objective * 1.001);
      } else {
        CHECK(c.objective == Approx(single.objective).epsilon(1e-3));
      }
      // The direct prox is a different method: it must not be what ran.
      CHECK(std::abs(direct.objective - c.objective) > 1e-6 * c.objective);
    }
  }
}

TEST_CASE("the stationarity check tells a SCAD stationary point from the L1 optimum",
          "[svm][consensus]") {
  // Without this the SCAD check above could pass vacuously.
  dataset d = test::synthetic({.n = 160, .p = 24, .seed = 21});
  penalty scad{penalty_kind::scad, 0.02, default_theta(penalty_kind::scad)};
  penalty l1{penalty_kind::l1, 0.02, 0};
  const admm_result s = admm_solve(d.x, d.y, scad, single_options());
  const admm_result a = admm_solve(d.x, d.y, l1, single_options());
  const double at_scad = test::stationarity_violation(d, s.w, s.b, scad, kMarginTol);
  const double l1_at_l1 = test::stationarity_violation(d, a.w, a.b, l1, kMarginTol);
  const double l1_as_scad = test::stationarity_violation(d, a.w, a.b, scad, kMarginTol);
  INFO("scad " << at_scad << " l1 " << l1_at_l1 << " l1 under scad " << l1_as_scad);
  CHECK(at_scad <= kStationarityTol);
  CHECK(l1_at_l1 <= kStationarityTol);
  CHECK(l1_as_scad > 10 * kStationarityTol);
  Eigen::VectorXd moved = s.w;
  moved[0] += 0.05;
  CHECK(test::stationarity_violation(d, moved, s.b, scad, kMarginTol) > 10 * kStationarityTol);
}

TEST_CASE("the consensus step averages contributions and proxes with K rho1", "[svm][consensus]") {
  penalty pen{penalty_kind::l1, 0.3, 0};
  consensus_reducer red(2, 10, 2, pen, 0.5, 0.1, {});
  Eigen::VectorXd a(3), b(3);
  a << 1.0, 0.1, 2.0;
  b << 2.0, -0.1, 4.0;
  const Eigen::VectorXd& z = red.combine({a, b});
  // v = (1.5, 0, 3); prox with K rho1 = 1: soft-threshold by 0.3; bias kept.
  CHECK(z[0] == Approx(1.2));
  CHECK(z[1] == 0);
  CHECK(z[2] == Approx(3.0));
  CHECK(red.change_norm() == Approx(std::sqrt(1.2 * 1.2 + 9)));
}

TEST_CASE("consensus refuses more workers than samples", "[svm][consensus]") {
  dataset d = test::synthetic({.n = 5, .p = 3});
  CHECK_THROWS_WITH(consensus_fit(d, 6, {}, {}),
                    Catch::Contains("--workers 6 exceeds the 5 samples"));
  CHECK_THROWS_WITH(consensus_fit(d, 0, {}, {}), Catch::Contains("--workers must be at least 1"));
}
