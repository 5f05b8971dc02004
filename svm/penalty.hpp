#pragma once
// Penalties P(t) on one weight and their rho-weighted proximal operators
//   prox_{P/rho}(v) = argmin_z P(z) + (rho/2)(z - v)^2.
// Each penalty's closed form holds for rho above a threshold (rho_threshold;
// the formulas are in penalty.cpp, the capped-L1 case in docs/svm.md, "What
// the solver does beyond the basic algorithm"); where it does not, the prox
// compares the objective at every per-piece candidate instead.

#include <Eigen/Core>

#include <string>
#include <string_view>

namespace merak::svm {

enum class penalty_kind { l1, scad, mcp, lsp, capped_l1 };

// "l1", "scad", "mcp", "lsp", "capped-l1"; throws merak::error naming the
// accepted names otherwise.
penalty_kind parse_penalty_kind(std::string_view name);
const char* penalty_name(penalty_kind k);
// The usual theta for each penalty (SCAD a = 3.7, MCP gamma = 3, ...).
double default_theta(penalty_kind k);

struct penalty {
  penalty_kind kind = penalty_kind::l1;
  double lambda = 0.01;  // >= 0
  double theta = 0;      // second parameter; ignored by L1

  // Throws merak::error naming the parameter when lambda or theta is out of
  // range for the kind (SCAD theta > 2, MCP theta > 1, LSP / capped theta > 0).
  void validate() const;

  // P(t).
  double value(double t) const;
  // d/du P(u) at u = |t| >= 0, from the right (P is concave and
  // non-decreasing in |t|, so this is a supergradient; at capped-L1's kink
  // |t| = theta it is 0). The weights of the local linear approximation
  // (lla.hpp).
  double slope(double t) const;
  // Sum_j P(w_j).
  double value(const Eigen::VectorXd& w) const;
  // prox_{P/rho}(v), rho > 0. Ties between equally good minimisers (capped-L1
  // and the candidate comparisons) go to the smaller |z|.
  double prox(double v, double rho) const;
  // Elementwise prox into out (may alias v).
  void prox(const Eigen::VectorXd& v, double rho, Eigen::VectorXd& out) const;
  // Smallest rho for which the closed-form prox applies (0 when it always
  // does): SCAD 1/(a-1), MCP 1/gamma, LSP lambda/theta^2, capped-L1
  // lambda/(2 theta) (the spec's capped-L1 closed form silently needs it).
  // ADMM keeps its rho1 above this.
  double rho_threshold() const;
  std::string str() const;
};

}  // namespace merak::svm
