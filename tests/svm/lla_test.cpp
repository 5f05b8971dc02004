#include <catch2/catch.hpp>

#include "svm/admm.hpp"
#include "svm/consensus.hpp"
#include "svm/lla.hpp"
#include "svm/objective.hpp"
#include "tests/svm/stationarity.hpp"
#include "tests/svm/svm_test_util.hpp"

using namespace merak::svm;

namespace {

// The default tolerances: a reweighted step with zero weights (coordinates
// past SCAD's a lambda or MCP's gamma lambda are unpenalised) converges
// slowly and does not reach 1e-5 in 20000 iterations on these data.
admm_options tight() {
  admm_options o;
  o.max_iter = 20000;
  return o;
}

// As in consensus_test.cpp: margins within 1e-2 of 1 may take any hinge
// subgradient; a violation below 2% of lambda counts as stationary.
constexpr double kMarginTol = 1e-2;

}  // namespace

TEST_CASE("LLA reaches stationary points that are no worse than the L1 fit", "[svm][lla]") {
  for (bool sparse : {false, true}) {
    dataset d = test::synthetic({.n = 160, .p = 24, .density = sparse ? 0.4 : 1.0, .seed = 21});
    for (auto kind : {penalty_kind::scad, penalty_kind::mcp, penalty_kind::lsp}) {
      penalty pen{kind, 0.02, default_theta(kind)};
      const admm_result l1 = admm_solve(d.x, d.y, {penalty_kind::l1, pen.lambda, 0}, tight());
      const admm_result r = lla_solve(d.x, d.y, pen, tight());
      const double viol = test::stationarity_violation(d, r.w, r.b, pen, kMarginTol);
      INFO(penalty_name(kind) << " sparse=" << sparse << " violation=" << viol
                              << " F=" << r.objective << " iterations=" << r.iterations);
      CHECK(r.converged);
      CHECK(viol <= 0.02 * pen.lambda);
      CHECK(r.objective == Approx(objective(d.x, d.y, r.w, r.b, pen)));
      CHECK(r.objective <= objective(d.x, d.y, l1.w, l1.b, pen) + 1e-9);
      // The L1 fit itself is not stationary for these penalties.
      CHECK(test::stationarity_violation(d, l1.w, l1.b, pen, kMarginTol) > 0.1 * pen.lambda);
    }
  }
}

TEST_CASE("LLA on golub-like data (n < p) keeps fewer weights than L1", "[svm][lla]") {
  dataset d = test::synthetic({.n = 40, .p = 300, .informative = 4, .flip = 0.0, .seed = 9});
  const penalty l1{penalty_kind::l1, 0.05, 0}, mcp{penalty_kind::mcp, 0.05, 2};
  const admm_result a = admm_solve(d.x, d.y, l1, tight()), m = lla_solve(d.x, d.y, mcp, tight());
  INFO("l1 nnz " << a.nnz() << " mcp nnz " << m.nnz());
  CHECK(m.nnz() < a.nnz());
  CHECK(m.objective <= objective(d.x, d.y, a.w, a.b, mcp) + 1e-9);
}

TEST_CASE("LLA with screened steps on wide data reaches stationary points", "[svm][lla]") {
  dataset d = test::synthetic({.n = 40, .p = 1200, .informative = 4, .seed = 22});
  for (auto kind :
       {penalty_kind::scad, penalty_kind::mcp, penalty_kind::lsp, penalty_kind::capped_l1}) {
    penalty pen{kind, 0.03, kind == penalty_kind::lsp ? 0.3 : default_theta(kind)};
    const admm_result l1 = admm_solve(d.x, d.y, {penalty_kind::l1, pen.lambda, 0}, tight());
    const admm_result r = lla_solve(d.x, d.y, pen, tight());
    const double viol = test::stationarity_violation(d, r.w, r.b, pen, kMarginTol);
    INFO(penalty_name(kind) << " violation=" << viol << " F=" << r.objective << " rounds="
                            << r.screen_rounds << " set=" << r.working_set << " nnz=" << r.nnz());
    CHECK(r.converged);
    CHECK(r.working_set < d.cols());
    CHECK(viol <= 0.02 * pen.lambda);
    CHECK(r.objective <= objective(d.x, d.y, l1.w, l1.b, pen) + 1e-9);
  }
}

TEST_CASE("weighted L1 with unit weights is L1, and zero weights leave a weight free",
          "[svm][lla]") {
  dataset d = test::synthetic({.n = 120, .p = 15, .seed = 5});
  penalty l1{penalty_kind::l1, 0.05, 0};
  admm_options o = tight();
  const admm_result plain = admm_solve(d.x, d.y, l1, o);
  o.l1_weights = Eigen::VectorXd::Ones(d.cols());
  const admm_result unit = admm_solve(d.x, d.y, l1, o);
  CHECK(unit.objective == Approx(plain.objective).epsilon(1e-4));
  o.l1_weights.setZero();
  const admm_result free = admm_solve(d.x, d.y, l1, o);
  CHECK(free.objective == Approx(mean_hinge(d.y, [&] {
          Eigen::VectorXd m;
          d.x.times(free.w, m);
          return Eigen::VectorXd(m.array() + free.b);
        }())));
  CHECK(free.objective < plain.objective);
  o.l1_weights = Eigen::VectorXd::Ones(3);
  CHECK_THROWS_WITH(admm_solve(d.x, d.y, l1, o), Catch::Contains("3 l1_weights for 15 features"));
}

TEST_CASE("a warm start from a converged state stops at once with the same fit", "[svm][admm]") {
  dataset d = test::synthetic({.n = 100, .p = 30, .seed = 7});
  for (auto kind : {penalty_kind::l1, penalty_kind::mcp}) {
    penalty pen{kind, 0.02, default_theta(kind)};
    const admm_result cold = admm_solve(d.x, d.y, pen, tight());
    const admm_result warm = admm_solve(d.x, d.y, pen, tight(), {}, &cold.state);
    INFO(penalty_name(kind) << " cold " << cold.iterations << " warm " << warm.iterations);
    CHECK(warm.iterations <= 20);
    CHECK(warm.objective == Approx(cold.objective).epsilon(1e-4));
  }
  admm_state bad;
  bad.z = Eigen::VectorXd::Zero(3);
  CHECK_THROWS_WITH(admm_solve(d.x, d.y, {}, tight(), {}, &bad),
                    Catch::Contains("warm start of size"));
}

TEST_CASE("over-relaxed ADMM reaches the same L1 optimum", "[svm][admm]") {
  dataset d = test::synthetic({.n = 150, .p = 20, .seed = 1});
  penalty l1{penalty_kind::l1, 0.01, 0};
  admm_options o = tight();
  const admm_result plain = admm_solve(d.x, d.y, l1, o);
  o.relaxation = 1.6;
  const admm_result relaxed = admm_solve(d.x, d.y, l1, o);
  CHECK(relaxed.converged);
  CHECK(relaxed.objective == Approx(plain.objective).epsilon(1e-4));
  o.relaxation = 2.0;
  CHECK_THROWS_WITH(admm_solve(d.x, d.y, l1, o), Catch::Contains("--relax must be in [1, 2)"));
}

TEST_CASE("the Woodbury step with carried products gives the same iterates", "[svm][admm]") {
  dataset d = test::synthetic({.n = 30, .p = 200, .informative = 4, .seed = 3});
  for (auto kind : {penalty_kind::l1, penalty_kind::mcp}) {
    penalty pen{kind, 0.03, default_theta(kind)};
    admm_options o;
    o.method = w_method::woodbury;
    o.relaxation = kind == penalty_kind::l1 ? 1.0 : 1.5;
    o.track_products = false;
    const admm_result plain = admm_solve(d.x, d.y, pen, o);
    o.track_products = true;
    const admm_result carried = admm_solve(d.x, d.y, pen, o);
    INFO(penalty_name(kind) << " iterations " << plain.iterations << " / " << carried.iterations);
    CHECK(std::abs(plain.iterations - carried.iterations) <= 2);
    CHECK(carried.objective == Approx(plain.objective).epsilon(1e-6));
    CHECK((carried.w - plain.w).cwiseAbs().maxCoeff() <= 1e-6);
  }
}

TEST_CASE("LLA's step 0 is the weighted L1 step from w = 0 (LSP: lambda / theta)", "[svm][lla]") {
  dataset d = test::synthetic({.n = 80, .p = 20, .seed = 4});
  lla_options only_step0;
  only_step0.max_steps = 0;
  only_step0.start = lla_start::zero;
  const penalty lsp{penalty_kind::lsp, 0.02, 0.5}, scad{penalty_kind::scad, 0.02, 3.7};
  // LSP's slope at 0 is lambda / theta: its first LLA step is L1 at 0.04.
  const admm_result l1_at_04 = admm_solve(d.x, d.y, {penalty_kind::l1, 0.04, 0}, tight());
  const admm_result l1_at_02 = admm_solve(d.x, d.y, {penalty_kind::l1, 0.02, 0}, tight());
  const admm_result a = lla_solve(d.x, d.y, lsp, tight(), only_step0);
  CHECK((a.w - l1_at_04.w).cwiseAbs().maxCoeff() <= 1e-6);
  CHECK(a.objective == Approx(objective(d.x, d.y, a.w, a.b, lsp)));
  // The two starts are different fits (the check above has teeth).
  REQUIRE((l1_at_04.w - l1_at_02.w).cwiseAbs().maxCoeff() > 1e-2);
  only_step0.start = lla_start::l1;
  const admm_result old_start = lla_solve(d.x, d.y, lsp, tight(), only_step0);
  CHECK((old_start.w - l1_at_02.w).cwiseAbs().maxCoeff() <= 1e-6);
  // SCAD (slope lambda at 0) starts from the L1 fit at lambda either way.
  only_step0.start = lla_start::zero;
  const admm_result s = lla_solve(d.x, d.y, scad, tight(), only_step0);
  CHECK((s.w - l1_at_02.w).cwiseAbs().maxCoeff() <= 1e-6);
}

TEST_CASE("LSP's LLA keeps the better of the chains from w = 0 and from the L1 fit", "[svm][lla]") {
  // lambda / theta = 2: the chain from w = 0 starts from the L1 fit at 2,
  // the empty model, and stays there (its weights never change).
  dataset d = test::synthetic({.n = 80, .p = 20, .informative = 4, .seed = 4});
  const penalty lsp{penalty_kind::lsp, 0.02, 0.01};
  lla_options o;
  o.start = lla_start::zero;
  const admm_result zero = lla_solve(d.x, d.y, lsp, tight(), o);
  o.start = lla_start::l1;
  const admm_result l1 = lla_solve(d.x, d.y, lsp, tight(), o);
  o.start = lla_start::best;
  const admm_result best = lla_solve(d.x, d.y, lsp, tight(), o);
  INFO("F from zero " << zero.objective << " (nnz " << zero.nnz() << "), from L1 " << l1.objective
                      << " (nnz " << l1.nnz() << "), best " << best.objective);
  REQUIRE(zero.nnz() == 0);
  REQUIRE(l1.objective < 0.8 * zero.objective);  // the case has teeth
  // The chain from L1 runs second, from where the first one started: it is
  // the l1 chain step for step (before, warm from the first chain's end, it
  // could end elsewhere, and below the better of the two).
  CHECK(best.objective == l1.objective);
  CHECK(best.w == l1.w);
  CHECK(best.iterations == zero.iterations + l1.iterations);
  // Consensus LLA (K = 2 row shards) makes the same choice.
  consensus_options c;
  c.max_iter = 20000;
  c.nonconvex = nonconvex_method::lla;  // n > p would resolve to direct
  c.lla.start = lla_start::best;
  const consensus_result k2 = consensus_fit(d, 2, lsp, c);
  CHECK(k2.objective == Approx(l1.objective).epsilon(1e-3));
  c.lla.start = lla_start::zero;
  CHECK(consensus_fit(d, 2, lsp, c).nnz() == 0);
  // With theta = 1 both starts are one chain: best is zero, step for step.
  const penalty lsp1{penalty_kind::lsp, 0.02, 1.0};
  o.start = lla_start::zero;
  const admm_result z1 = lla_solve(d.x, d.y, lsp1, tight(), o);
  o.start = lla_start::best;
  const admm_result b1 = lla_solve(d.x, d.y, lsp1, tight(), o);
  CHECK(b1.iterations == z1.iterations);
  CHECK(b1.objective == z1.objective);
}
