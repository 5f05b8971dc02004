#include "model/parameter.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

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

// The blocks of `s` as (units, rows per unit).
std::vector<std::pair<int64_t, int64_t>> blocks_of(const shard_spec& s) {
  std::vector<std::pair<int64_t, int64_t>> out;
  if (!s.blocks.empty()) {
    for (int64_t n : s.blocks) out.push_back({n, s.unit});
    return out;
  }
  const int64_t n = s.full[size_t(s.dim)];
  for (int g = 0; g < s.groups; ++g) out.push_back({n / s.groups, 1});
  return out;
}

}  // namespace

std::string shard_split_error(const shard_spec& s) {
  if (!s.sharded()) return "";
  if (s.dim >= int(s.full.size()) || s.parts < 1 || s.index < 0 || s.index >= s.parts)
    return fmt::format("slice {} of {} along dimension {} of shape {}", s.index, s.parts, s.dim,
                       shape_str(s.full));
  const int64_t n = s.full[size_t(s.dim)];
  if (s.blocks.empty()) {
    if (s.groups < 1 || n % (int64_t(s.groups) * s.parts) != 0)
      return fmt::format("slice {} of {} along dimension {} ({} groups) does not split shape {}",
                         s.index, s.parts, s.dim, s.groups, shape_str(s.full));
    return "";
  }
  int64_t rows = 0;
  for (int64_t b : s.blocks) {
    if (b < 1 || (b % s.parts != 0 && s.parts % b != 0))
      return fmt::format("{} parts do not split a block of {} units", s.parts, b);
    rows += b * s.unit;
  }
  if (s.unit < 1 || rows != n)
    return fmt::format("blocks [{}] of {} rows do not make dimension {} of shape {}",
                       fmt::join(s.blocks, ", "), s.unit, s.dim, shape_str(s.full));
  return "";
}

int shard_spec::copies() const {
  int c = 1;
  if (sharded())
    for (auto [n, unit] : blocks_of(*this))
      if (n % parts != 0) c = std::max(c, int(parts / n));
  return c;
}

void for_each_shard_block(const shard_spec& s,
                          const std::function<void(int64_t, int64_t, bool)>& f) {
  if (auto e = shard_split_error(s); !e.empty()) fail("shard: {}", e);
  int64_t at = 0;
  for (auto [n, unit] : blocks_of(s)) {
    if (n % s.parts == 0)
      f(at + s.index * (n / s.parts) * unit, n / s.parts * unit, false);
    else
      f(at + s.index / (s.parts / n) * unit, unit, true);
    at += n * unit;
  }
}

int64_t replicated_numel(const shard_spec& s) {
  if (s.copies() == 1) return 0;
  const int64_t inner = shape_numel(s.full) / s.full[0];
  int64_t n = 0;
  for (auto [units, unit] : blocks_of(s))
    if (units % s.parts != 0) n += units * unit * inner;
  return n;
}

void for_each_replicated_run(const shard_spec& s,
                             const std::function<void(int64_t, int64_t, int64_t)>& f) {
  if (s.copies() == 1) return;
  MERAK_CHECK(s.dim == 0, "replicated blocks along dimension {}", s.dim);
  const int64_t inner = shape_numel(s.full) / s.full[0];
  int64_t packed = 0, part = 0;
  for (auto [units, unit] : blocks_of(s)) {
    if (units % s.parts == 0) {
      part += units / s.parts * unit * inner;
      continue;
    }
    f(packed + s.index / (s.parts / units) * unit * inner, part, unit * inner);
    part += unit * inner;
    packed += units * unit * inner;
  }
}

double replicated_sumsq(const shard_spec& s, const tensor& part, int64_t begin, int64_t end) {
  const float* g = part.f32();
  double sum = 0;
  for_each_replicated_run(s, [&](int64_t, int64_t at, int64_t count) {
    for (int64_t i = std::max(at, begin); i < std::min(at + count, end); ++i)
      sum += double(g[i]) * g[i];
  });
  return sum;
}

shape_t shard_shape(const shard_spec& s) {
  if (!s.sharded()) return s.full;
  shape_t out = s.full;
  int64_t rows = 0;
  for_each_shard_block(s, [&](int64_t, int64_t count, bool) { rows += count; });
  out[size_t(s.dim)] = rows;
  return out;
}

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
  std::vector<std::pair<int64_t, int64_t>> runs;
  for_each_shard_block(s, [&](int64_t begin, int64_t count, bool) { runs.push_back({begin, count}); });
  int64_t out = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (auto [begin, count] : runs) {
      f((o * n + begin) * inner, out, count * inner);
      out += count * inner;
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
