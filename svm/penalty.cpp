#include "svm/penalty.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace merak::svm {
namespace {

double soft(double v, double tau) {
  double u = std::abs(v) - tau;
  return u > 0 ? std::copysign(u, v) : 0.0;
}

// Picks, among candidate magnitudes m >= 0 (in order of increasing |z|
// preference), the one whose z = sign(v) m minimises P(z) + (rho/2)(z - v)^2.
template <size_t N>
double best_candidate(const penalty& p, double v, double rho, const double (&mags)[N]) {
  const double s = v < 0 ? -1.0 : 1.0;
  double best_z = 0, best_f = p.value(0.0) + 0.5 * rho * v * v;
  for (double m : mags) {
    if (!(m >= 0) || !std::isfinite(m)) continue;
    double z = s * m;
    double f = p.value(z) + 0.5 * rho * (z - v) * (z - v);
    if (f < best_f || (f == best_f && std::abs(z) < std::abs(best_z))) best_f = f, best_z = z;
  }
  return best_z;
}

double prox_scad(const penalty& p, double v, double rho) {
  const double l = p.lambda, a = p.theta, u = std::abs(v);
  if (rho * (a - 1) > 1) {
    if (u <= l * (1 + 1 / rho)) return soft(v, l / rho);
    if (u <= a * l) return std::copysign((rho * (a - 1) * u - a * l) / (rho * (a - 1) - 1), v);
    return v;
  }
  // The middle piece is concave (or linear): its minimum is at an end.
  const double c[] = {std::clamp(u - l / rho, 0.0, l), l, a * l, std::max(u, a * l)};
  return best_candidate(p, v, rho, c);
}

double prox_mcp(const penalty& p, double v, double rho) {
  const double l = p.lambda, g = p.theta, u = std::abs(v);
  if (rho * g > 1) return u <= g * l ? soft(v, l / rho) / (1 - 1 / (g * rho)) : v;
  // lambda|z| - z^2/(2 gamma) + rho/2 (z - v)^2 is concave (or linear) on
  // [0, gamma lambda]: only the ends and the outer piece's minimiser remain.
  const double c[] = {g * l, std::max(u, g * l)};
  return best_candidate(p, v, rho, c);
}

double prox_lsp(const penalty& p, double v, double rho) {
  const double l = p.lambda, th = p.theta, u = std::abs(v);
  if (rho * th * th >= l) {
    if (u <= l / (rho * th)) return 0.0;
    return std::copysign(0.5 * ((u - th) + std::sqrt((u + th) * (u + th) - 4 * l / rho)), v);
  }
  const double D = (u + th) * (u + th) - 4 * l / rho;
  if (D < 0) return 0.0;
  const double r = std::sqrt(D);
  const double c[] = {std::max(0.0, 0.5 * ((u - th) - r)), std::max(0.0, 0.5 * ((u - th) + r))};
  return best_candidate(p, v, rho, c);
}

double prox_capped(const penalty& p, double v, double rho) {
  // The usual closed form holds only when 2 rho theta >= lambda: otherwise
  // the soft-threshold piece is still 0 where keeping v (cost lambda theta)
  // already wins, at u > sqrt(2 lambda theta / rho). Compare the two pieces'
  // minimisers then. At a tie keep the sparser one.
  const double u = std::abs(v), l = p.lambda, th = p.theta;
  if (2 * rho * th >= l) return u > th + l / (2 * rho) ? v : soft(v, l / rho);
  const double c[] = {std::clamp(u - l / rho, 0.0, th), std::max(u, th)};
  return best_candidate(p, v, rho, c);
}

}  // namespace

penalty_kind parse_penalty_kind(std::string_view name) {
  if (name == "l1") return penalty_kind::l1;
  if (name == "scad") return penalty_kind::scad;
  if (name == "mcp") return penalty_kind::mcp;
  if (name == "lsp") return penalty_kind::lsp;
  if (name == "capped-l1" || name == "capped_l1") return penalty_kind::capped_l1;
  fail("unknown penalty '{}' (expected l1, scad, mcp, lsp or capped-l1)", name);
}

const char* penalty_name(penalty_kind k) {
  switch (k) {
    case penalty_kind::l1:
      return "l1";
    case penalty_kind::scad:
      return "scad";
    case penalty_kind::mcp:
      return "mcp";
    case penalty_kind::lsp:
      return "lsp";
    case penalty_kind::capped_l1:
      return "capped-l1";
  }
  return "?";
}

double default_theta(penalty_kind k) {
  switch (k) {
    case penalty_kind::l1:
      return 0.0;
    case penalty_kind::scad:
      return 3.7;
    case penalty_kind::mcp:
      return 3.0;
    case penalty_kind::lsp:
      return 1.0;
    case penalty_kind::capped_l1:
      return 1.0;
  }
  return 0.0;
}

void penalty::validate() const {
  if (!(lambda >= 0) || !std::isfinite(lambda)) fail("--lambda must be >= 0 (got {})", lambda);
  switch (kind) {
    case penalty_kind::l1:
      break;
    case penalty_kind::scad:
      if (!(theta > 2)) fail("--theta (SCAD a) must be > 2 (got {})", theta);
      break;
    case penalty_kind::mcp:
      if (!(theta > 1)) fail("--theta (MCP gamma) must be > 1 (got {})", theta);
      break;
    case penalty_kind::lsp:
    case penalty_kind::capped_l1:
      if (!(theta > 0)) fail("--theta must be > 0 for {} (got {})", penalty_name(kind), theta);
      break;
  }
  if (!std::isfinite(theta)) fail("--theta must be finite (got {})", theta);
}

double penalty::value(double t) const {
  const double u = std::abs(t), l = lambda;
  switch (kind) {
    case penalty_kind::l1:
      return l * u;
    case penalty_kind::scad: {
      const double a = theta;
      if (u <= l) return l * u;
      if (u <= a * l) return (2 * a * l * u - u * u - l * l) / (2 * (a - 1));
      return (a + 1) * l * l / 2;
    }
    case penalty_kind::mcp:
      return u <= theta * l ? l * u - u * u / (2 * theta) : theta * l * l / 2;
    case penalty_kind::lsp:
      return l * std::log1p(u / theta);
    case penalty_kind::capped_l1:
      return l * std::min(u, theta);
  }
  return 0;
}

double penalty::slope(double t) const {
  const double u = std::abs(t), l = lambda;
  switch (kind) {
    case penalty_kind::l1:
      return l;
    case penalty_kind::scad:
      return u <= l ? l : u <= theta * l ? (theta * l - u) / (theta - 1) : 0.0;
    case penalty_kind::mcp:
      return std::max(l - u / theta, 0.0);
    case penalty_kind::lsp:
      return l / (theta + u);
    case penalty_kind::capped_l1:
      return u < theta ? l : 0.0;
  }
  return l;
}

double penalty::value(const Eigen::VectorXd& w) const {
  double s = 0;
  for (Eigen::Index j = 0; j < w.size(); ++j) s += value(w[j]);
  return s;
}

double penalty::prox(double v, double rho) const {
  switch (kind) {
    case penalty_kind::l1:
      return soft(v, lambda / rho);
    case penalty_kind::scad:
      return prox_scad(*this, v, rho);
    case penalty_kind::mcp:
      return prox_mcp(*this, v, rho);
    case penalty_kind::lsp:
      return prox_lsp(*this, v, rho);
    case penalty_kind::capped_l1:
      return prox_capped(*this, v, rho);
  }
  return v;
}

void penalty::prox(const Eigen::VectorXd& v, double rho, Eigen::VectorXd& out) const {
  out.resize(v.size());
  // The kind is dispatched once per vector, not per element (the prox is a
  // sixth of an ADMM iteration on small dense data).
  auto each = [&](auto&& f) {
    for (Eigen::Index j = 0; j < v.size(); ++j) out[j] = f(v[j]);
  };
  switch (kind) {
    case penalty_kind::l1: {
      const double tau = lambda / rho;
      out = (v.array().abs() - tau).max(0.0) * v.array().sign();
      break;
    }
    case penalty_kind::scad:
      each([&](double x) { return prox_scad(*this, x, rho); });
      break;
    case penalty_kind::mcp:
      each([&](double x) { return prox_mcp(*this, x, rho); });
      break;
    case penalty_kind::lsp:
      each([&](double x) { return prox_lsp(*this, x, rho); });
      break;
    case penalty_kind::capped_l1:
      each([&](double x) { return prox_capped(*this, x, rho); });
      break;
  }
}

double penalty::rho_threshold() const {
  switch (kind) {
    case penalty_kind::scad:
      return 1 / (theta - 1);
    case penalty_kind::mcp:
      return 1 / theta;
    case penalty_kind::lsp:
      return lambda / (theta * theta);
    case penalty_kind::capped_l1:
      return lambda / (2 * theta);
    default:
      return 0;
  }
}

std::string penalty::str() const {
  if (kind == penalty_kind::l1) return fmt::format("l1(lambda={})", lambda);
  return fmt::format("{}(lambda={}, theta={})", penalty_name(kind), lambda, theta);
}

}  // namespace merak::svm
