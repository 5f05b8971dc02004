#include "model/adamw.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "model/backend.hpp"

namespace merak::model {

adamw::adamw(adamw_config cfg, std::vector<parameter_ptr> params)
    : cfg_(cfg), params_(std::move(params)) {
  for (auto& p : params_) {  // beside the parameter, on its device
    m_.push_back(tensor::zeros(p->value.shape(), dtype::f32, p->value.where()));
    v_.push_back(tensor::zeros(p->value.shape(), dtype::f32, p->value.where()));
  }
}

void adamw::step(float lr, float grad_scale, bool zero_grads) {
  ++t_;
  const float b1 = cfg_.beta1, b2 = cfg_.beta2, eps = cfg_.eps;
  const float c1 = 1.0f / (1.0f - std::pow(b1, float(t_)));
  const float c2 = 1.0f / (1.0f - std::pow(b2, float(t_)));
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i]->value.where().type != device::kind::cpu) {
      const float wd = params_[i]->spec.decay ? cfg_.weight_decay : 0.f;
      backend_for(params_[i]->value.where())
          .adamw_update(params_[i]->value, params_[i]->grad, m_[i], v_[i],
                        {lr, b1, b2, eps, wd, c1, c2, grad_scale, zero_grads});
      continue;
    }
    const float wd = params_[i]->spec.decay ? cfg_.weight_decay : 0.f;
    adamw_update_host(params_[i]->value.f32(), params_[i]->grad.f32(), m_[i].f32(), v_[i].f32(),
                      params_[i]->value.numel(),
                      {lr, b1, b2, eps, wd, c1, c2, grad_scale, zero_grads});
  }
}

void adamw_update_host(float* w, float* g, float* m, float* v, int64_t n,
                       const backend::adamw_args& a) {
  const float b1 = a.beta1, b2 = a.beta2, eps = a.eps, wd = a.weight_decay, lr = a.lr;
  const float c1 = a.c1, c2 = a.c2, grad_scale = a.grad_scale;
  const bool zero_grads = a.zero_grad;
#pragma omp parallel for simd schedule(static)
  for (int64_t j = 0; j < n; ++j) {
    const float gj = grad_scale == 1.0f ? g[j] : g[j] * grad_scale;
    float mj = b1 * m[j] + (1.0f - b1) * gj;
    float vj = b2 * v[j] + (1.0f - b2) * gj * gj;
    m[j] = mj;
    v[j] = vj;
    w[j] -= lr * (mj * c1 / (std::sqrt(vj * c2) + eps) + wd * w[j]);
    if (zero_grads) g[j] = 0.f;
  }
}

double global_grad_norm(const std::vector<parameter_ptr>& params) {
  // Each gradient's sum of squares on its device (deterministic), added in
  // parameter order.
  double total = 0;
  for (auto& p : params) total += backend_for(p->grad.where()).sum_squares(p->grad);
  return std::sqrt(total);
}

float clip_factor(double norm, double max_norm) {
  return max_norm > 0 && norm > max_norm ? float(max_norm / (norm + 1e-6)) : 1.0f;
}

double clip_grad_norm(const std::vector<parameter_ptr>& params, double max_norm) {
  double norm = global_grad_norm(params);
  if (max_norm > 0 && norm > max_norm) {
    float f = clip_factor(norm, max_norm);
    for (auto& p : params) {
      if (p->grad.where().type != device::kind::cpu) {
        backend_for(p->grad.where()).scale(p->grad, f);
        continue;
      }
      float* g = p->grad.f32();
      const int64_t n = p->grad.numel();
#pragma omp parallel for simd schedule(static)
      for (int64_t j = 0; j < n; ++j) g[j] *= f;
    }
  }
  return norm;
}

lr_decay parse_lr_decay(std::string_view name) {
  if (name == "cosine") return lr_decay::cosine;
  if (name == "linear") return lr_decay::linear;
  if (name == "constant") return lr_decay::constant;
  fail("--lr-decay-style must be cosine, linear or constant (got '{}')", name);
}

float lr_schedule::at(int64_t step) const {
  if (warmup_steps > 0 && step <= warmup_steps)
    return float(warmup_init +
                 double(max_lr - warmup_init) * double(step) / double(warmup_steps));
  if (style == lr_decay::constant) return max_lr;
  if (step >= total_steps) return min_lr;
  double span = double(std::max<int64_t>(1, total_steps - warmup_steps));
  double ratio = double(step - warmup_steps) / span;
  double coeff = style == lr_decay::linear ? 1.0 - ratio : 0.5 * (1.0 + std::cos(M_PI * ratio));
  return float(min_lr + coeff * (max_lr - min_lr));
}

}  // namespace merak::model
