#include "model/parameter.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace merak::model {
namespace {

uint64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

void initialise(tensor& value, const param_spec& spec, uint64_t seed) {
  float* p = value.f32();
  int64_t n = value.numel();
  switch (spec.init) {
    case init_kind::zeros:
      std::fill(p, p + n, 0.f);
      break;
    case init_kind::ones:
      std::fill(p, p + n, 1.f);
      break;
    case init_kind::normal: {
      rng r(seed, name_hash(spec.name));
      for (int64_t i = 0; i < n; ++i) p[i] = float(r.normal()) * spec.stddev;
      break;
    }
  }
}

parameter_ptr parameter_store::get_or_create(const param_spec& spec) {
  if (auto it = by_name_.find(spec.name); it != by_name_.end()) {
    if (it->second->spec.shape != spec.shape)
      fail("parameter '{}' is used with shape {} and {}", spec.name,
           shape_str(it->second->spec.shape), shape_str(spec.shape));
    return it->second;
  }
  auto p = std::make_shared<parameter>();
  p->spec = spec;
  p->value = tensor(spec.shape);
  initialise(p->value, spec, seed_);
  p->grad = tensor::zeros(spec.shape);
  by_name_[spec.name] = p;
  ordered_.push_back(p);
  return p;
}

parameter_ptr parameter_store::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

int64_t parameter_store::numel() const {
  int64_t n = 0;
  for (auto& p : ordered_) n += p->value.numel();
  return n;
}

void parameter_store::zero_grads() {
  for (auto& p : ordered_) p->grad.fill_zero();
}

}  // namespace merak::model
