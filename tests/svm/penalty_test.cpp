#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "svm/penalty.hpp"

using namespace merak::svm;

namespace {

// argmin_z P(z) + (rho/2)(z - v)^2 by brute force on a fine grid around v,
// refined by a second finer grid around the best point.
double brute_prox(const penalty& p, double v, double rho) {
  auto f = [&](double z) { return p.value(z) + 0.5 * rho * (z - v) * (z - v); };
  const double span = std::abs(v) + 1.0;
  double best = 0, best_f = f(0.0);
  const int steps = 200000;
  for (int i = 0; i <= steps; ++i) {
    double z = -span + 2 * span * i / steps;
    if (f(z) < best_f) best_f = f(z), best = z;
  }
  const double h = 2 * span / steps;
  for (int i = -2000; i <= 2000; ++i) {
    double z = best + h * i / 1000.0;
    if (f(z) < best_f) best_f = f(z), best = z;
  }
  return best;
}

struct prox_case {
  penalty pen;
  double rho;
  const char* what;
};

}  // namespace

TEST_CASE("every prox matches brute-force minimisation, above and below the rho threshold",
          "[svm][penalty]") {
  std::vector<prox_case> cases = {
      {{penalty_kind::l1, 0.5, 0}, 1.0, "l1"},
      {{penalty_kind::l1, 0.3, 0}, 0.2, "l1 small rho"},
      {{penalty_kind::scad, 0.5, 3.7}, 2.0, "scad closed form"},
      {{penalty_kind::scad, 0.5, 3.7}, 0.2, "scad rho(a-1) < 1"},
      {{penalty_kind::scad, 0.8, 2.5}, 0.5, "scad rho(a-1) < 1, small a"},
      {{penalty_kind::mcp, 0.5, 3.0}, 1.0, "mcp closed form"},
      {{penalty_kind::mcp, 0.5, 3.0}, 0.2, "mcp rho gamma < 1"},
      {{penalty_kind::mcp, 0.7, 1.5}, 0.5, "mcp rho gamma < 1, small gamma"},
      {{penalty_kind::lsp, 0.5, 1.0}, 1.0, "lsp closed form"},
      {{penalty_kind::lsp, 0.5, 0.2}, 1.0, "lsp rho theta^2 < lambda"},
      {{penalty_kind::lsp, 2.0, 0.1}, 0.5, "lsp far below threshold"},
      {{penalty_kind::capped_l1, 0.5, 1.0}, 1.0, "capped-l1"},
      {{penalty_kind::capped_l1, 0.5, 0.3}, 0.2, "capped-l1 small rho"},
  };
  for (const auto& c : cases) {
    INFO(c.what << " rho=" << c.rho);
    for (double v = -5.0; v <= 5.0; v += 0.0371) {
      INFO("v=" << v);
      const double z = c.pen.prox(v, c.rho);
      const double zb = brute_prox(c.pen, v, c.rho);
      auto f = [&](double s) { return c.pen.value(s) + 0.5 * c.rho * (s - v) * (s - v); };
      // The prox value is never worse than the grid optimum...
      CHECK(f(z) <= f(zb) + 1e-9);
      // ...and is the same point unless two minimisers tie.
      if (std::abs(f(z) - f(zb)) > 1e-7 * (1 + std::abs(f(z)))) CHECK(z == Approx(zb).margin(1e-4));
    }
  }
}

TEST_CASE("the unit-weight prox with lambda/rho is not the rho-weighted prox for MCP",
          "[svm][penalty]") {
  // Guards against the published bug the spec warns about.
  penalty p{penalty_kind::mcp, 1.0, 3.0};
  const double rho = 2.0, v = 1.5;
  penalty wrong{penalty_kind::mcp, 1.0 / rho, 3.0};
  CHECK(p.prox(v, rho) != Approx(wrong.prox(v, 1.0)));
  CHECK(p.prox(v, rho) == Approx(brute_prox(p, v, rho)).margin(1e-4));
}

TEST_CASE("penalty values follow their definitions", "[svm][penalty]") {
  penalty scad{penalty_kind::scad, 1.0, 3.7};
  CHECK(scad.value(0.5) == Approx(0.5));
  CHECK(scad.value(10.0) == Approx(4.7 / 2));
  CHECK(scad.value(2.0) == Approx((2 * 3.7 * 2 - 4 - 1) / (2 * 2.7)));
  penalty mcp{penalty_kind::mcp, 1.0, 2.0};
  CHECK(mcp.value(-1.0) == Approx(1.0 - 0.25));
  CHECK(mcp.value(5.0) == Approx(1.0));
  penalty lsp{penalty_kind::lsp, 2.0, 0.5};
  CHECK(lsp.value(1.0) == Approx(2.0 * std::log(3.0)));
  penalty cap{penalty_kind::capped_l1, 2.0, 0.5};
  CHECK(cap.value(0.25) == Approx(0.5));
  CHECK(cap.value(-3.0) == Approx(1.0));
  // Continuity at the SCAD and MCP knots.
  CHECK(scad.value(1.0 - 1e-9) == Approx(scad.value(1.0 + 1e-9)));
  CHECK(scad.value(3.7 - 1e-9) == Approx(scad.value(3.7 + 1e-9)));
  CHECK(mcp.value(2.0 - 1e-9) == Approx(mcp.value(2.0 + 1e-9)));
}

TEST_CASE("bad penalty names and parameters are refused with the flag named", "[svm][penalty]") {
  CHECK_THROWS_WITH(parse_penalty_kind("ridge"), Catch::Contains("unknown penalty 'ridge'"));
  CHECK(parse_penalty_kind("capped-l1") == penalty_kind::capped_l1);
  CHECK_THROWS_WITH((penalty{penalty_kind::scad, 0.1, 2.0}.validate()),
                    Catch::Contains("--theta (SCAD a) must be > 2"));
  CHECK_THROWS_WITH((penalty{penalty_kind::mcp, 0.1, 1.0}.validate()),
                    Catch::Contains("--theta (MCP gamma) must be > 1"));
  CHECK_THROWS_WITH((penalty{penalty_kind::l1, -1, 0}.validate()),
                    Catch::Contains("--lambda must be >= 0"));
}

TEST_CASE("the vector prox equals the scalar prox elementwise", "[svm][penalty]") {
  Eigen::VectorXd v = Eigen::VectorXd::LinSpaced(401, -4.0, 4.0);
  for (auto kind : {penalty_kind::l1, penalty_kind::scad, penalty_kind::mcp, penalty_kind::lsp,
                    penalty_kind::capped_l1}) {
    penalty p{kind, 0.7, kind == penalty_kind::l1 ? 0.0 : default_theta(kind)};
    for (double rho : {0.1, 1.0, 5.0}) {
      Eigen::VectorXd out;
      p.prox(v, rho, out);
      for (Eigen::Index j = 0; j < v.size(); ++j) CHECK(out[j] == p.prox(v[j], rho));
    }
  }
}
