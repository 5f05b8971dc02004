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

namespace {

// Calls f(offset in full, offset in part, count) for every contiguous run
// of the shard, in order.
template <typename F>
void for_each_shard_run(const shard_spec& s, F&& f) {
  const auto& full = s.full;
  MERAK_CHECK(s.dim >= 0 && s.dim < int(full.size()), "shard dimension {}", s.dim);
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < s.dim; ++i) outer *= full[i];
  for (size_t i = s.dim + 1; i < full.size(); ++i) inner *= full[i];
  const int64_t n = full[s.dim];
  MERAK_CHECK(n % (int64_t(s.groups) * s.parts) == 0, "dimension {} of size {} in {} x {} parts",
              s.dim, n, s.groups, s.parts);
  const int64_t block = n / s.groups, slice = block / s.parts;
  int64_t out = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int g = 0; g < s.groups; ++g) {
      int64_t first = o * n + g * block + int64_t(s.index) * slice;
      f(first * inner, out, slice * inner);
      out += slice * inner;
    }
}

}  // namespace

void copy_shard(const tensor& full, tensor& part, const shard_spec& s) {
  MERAK_CHECK(full.shape() == s.full, "full tensor {} for a shard of {}", shape_str(full.shape()),
              shape_str(s.full));
  const float* src = full.f32();
  float* dst = part.f32();
  for_each_shard_run(s, [&](int64_t from, int64_t to, int64_t n) {
    MERAK_CHECK(to + n <= part.numel(), "shard of {} elements overflows", part.numel());
    std::copy(src + from, src + from + n, dst + to);
  });
}

void place_shard(tensor& full, const tensor& part, const shard_spec& s) {
  MERAK_CHECK(full.shape() == s.full, "full tensor {} for a shard of {}", shape_str(full.shape()),
              shape_str(s.full));
  const float* src = part.f32();
  float* dst = full.f32();
  for_each_shard_run(s, [&](int64_t to, int64_t from, int64_t n) {
    MERAK_CHECK(from + n <= part.numel(), "shard of {} elements overflows", part.numel());
    std::copy(src + from, src + from + n, dst + to);
  });
}

void initialise(tensor& value, const param_spec& spec, uint64_t seed) {
  if (spec.shard.sharded()) {
    param_spec whole = spec;
    whole.shape = spec.shard.full;
    whole.shard = {};
    tensor full(whole.shape);
    initialise(full, whole, seed);
    copy_shard(full, value, spec.shard);
    return;
  }
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
  if (where_.type != device::kind::cpu) p->value = p->value.to(where_);
  p->grad = tensor::zeros(spec.shape, dtype::f32, where_);
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
