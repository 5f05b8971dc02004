#include <catch2/catch.hpp>

#include "svm/admm.hpp"
#include "svm/consensus.hpp"
#include "svm/objective.hpp"
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
        if (kind == penalty_kind::scad)
          CHECK(c.objective == Approx(single.objective).epsilon(0.02));
        else
          CHECK(c.objective == Approx(single.objective).epsilon(1e-3));
      }
    }
  }
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
