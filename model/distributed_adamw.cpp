#include "model/distributed_adamw.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.hpp"
#include "core/shards.hpp"
#include "model/backend.hpp"

namespace merak::model {

distributed_adamw::distributed_adamw(adamw_config cfg, std::vector<parameter_ptr> params,
                                     std::vector<std::vector<int>> buckets, int ranks, int rank)
    : cfg_(cfg), params_(std::move(params)), buckets_(std::move(buckets)) {
  MERAK_CHECK(ranks > 0 && rank >= 0 && rank < ranks, "distributed optimizer: rank {} of {}", rank,
              ranks);
  bucket_of_.assign(params_.size(), -1);
  offset_in_.assign(params_.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    int64_t at = 0;
    for (int p : buckets_[b]) {
      MERAK_CHECK(p >= 0 && size_t(p) < params_.size(), "distributed optimizer: bucket {} names parameter {} of {}", b, p, params_.size());
      MERAK_CHECK(bucket_of_[size_t(p)] < 0, "distributed optimizer: parameter '{}' in buckets {} and {}",
                  params_[size_t(p)]->spec.name, bucket_of_[size_t(p)], b);
      MERAK_CHECK(params_[size_t(p)]->value.where() == params_.front()->value.where(),
                  "distributed optimizer: parameter '{}' is on {}, the others on {}",
                  params_[size_t(p)]->spec.name, params_[size_t(p)]->value.where().str(),
                  params_.front()->value.where().str());
      bucket_of_[size_t(p)] = int(b);
      offset_in_[size_t(p)] = at;
      at += params_[size_t(p)]->value.numel();
    }
    numel_.push_back(at);
    auto own = even_shard(at, ranks, rank);
    owned_.push_back(own);
    std::vector<piece> pieces;
    for (int p : buckets_[b]) {
      const int64_t lo = std::max(own.first, offset_in_[size_t(p)]);
      const int64_t hi = std::min(own.second, offset_in_[size_t(p)] + params_[size_t(p)]->value.numel());
      if (lo < hi) pieces.push_back({p, lo - offset_in_[size_t(p)], hi - offset_in_[size_t(p)], lo});
    }
    pieces_.push_back(std::move(pieces));
    m_.push_back(tensor::zeros({own.second - own.first}));
    v_.push_back(tensor::zeros({own.second - own.first}));
  }
  g_.resize(buckets_.size());
  sharded_.assign(buckets_.size(), 0);
  for (size_t p = 0; p < params_.size(); ++p)
    MERAK_CHECK(bucket_of_[p] >= 0, "distributed optimizer: parameter '{}' is in no bucket",
                params_[p]->spec.name);
  if (!params_.empty()) where_ = params_.front()->value.where();
  // Device parameters: the owned values (the masters) live here, in host
  // memory, beside the moments.
  if (where_.type != device::kind::cpu) keep_value_shards();
}

void distributed_adamw::keep_gradient_shards(const std::vector<char>& sharded) {
  MERAK_CHECK(sharded.size() == buckets_.size(),
              "distributed optimizer: {} gradient-shard flags for {} buckets", sharded.size(),
              buckets_.size());
  sharded_ = sharded;
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (sharded[b]) g_[b].assign(size_t(owned_[b].second - owned_[b].first), 0.f);
}

void distributed_adamw::add_owned_gradient(int b, const float* owned_sum) {
  MERAK_CHECK(gradient_sharded(b), "distributed optimizer: bucket {} keeps no gradient shard", b);
  auto& g = g_[size_t(b)];
  for (size_t j = 0; j < g.size(); ++j) g[j] += owned_sum[j];
}

void distributed_adamw::zero_gradient_shards() {
  for (auto& g : g_) std::fill(g.begin(), g.end(), 0.f);
}

int64_t distributed_adamw::gradient_shard_bytes() const {
  int64_t n = 0;
  for (auto& g : g_) n += int64_t(g.size() * sizeof(float));
  return n;
}

float* distributed_adamw::piece_gradient(size_t b, const piece& pc) const {
  if (gradient_sharded(int(b))) return g_[b].data() + (pc.flat - owned_[b].first);
  auto& grad = params_[size_t(pc.param)]->grad;
  if (grad.where().type == device::kind::cpu) return grad.f32() + pc.begin;
  // A device gradient: its piece copied to host scratch (valid until the next call).
  if (scratch_.numel() < pc.end - pc.begin) scratch_ = tensor({pc.end - pc.begin});
  copy_bytes(scratch_, 0, grad, size_t(pc.begin) * sizeof(float),
             size_t(pc.end - pc.begin) * sizeof(float));
  return scratch_.f32();
}

double distributed_adamw::owned_sumsq(const std::function<bool(int)>& counts) const {
  double total = 0;
  for (size_t b = 0; b < pieces_.size(); ++b)
    for (auto& pc : pieces_[b]) {
      if (!counts(pc.param)) continue;
      const float* g = piece_gradient(b, pc);
      double s = 0;
      for (int64_t j = 0; j < pc.end - pc.begin; ++j) s += double(g[j]) * double(g[j]);
      total += s;
    }
  return total;
}

void distributed_adamw::step(float lr, float grad_scale, bool zero_grads) {
  ++t_;
  const float c1 = 1.0f / (1.0f - std::pow(cfg_.beta1, float(t_)));
  const float c2 = 1.0f / (1.0f - std::pow(cfg_.beta2, float(t_)));
  for (size_t b = 0; b < pieces_.size(); ++b)
    for (auto& pc : pieces_[b]) {
      auto& prm = *params_[size_t(pc.param)];
      const float wd = prm.spec.decay ? cfg_.weight_decay : 0.f;
      const int64_t at = pc.flat - owned_[b].first;
      adamw_update_host(piece_value(b, pc), piece_gradient(b, pc), m_[b].f32() + at,
                        v_[b].f32() + at, pc.end - pc.begin,
                        {lr, cfg_.beta1, cfg_.beta2, cfg_.eps, wd, c1, c2, grad_scale, false});
    }
  if (!zero_grads) return;
  for (auto& p : params_)
    if (p->grad.defined()) p->grad.fill_zero();
  zero_gradient_shards();
}

float* distributed_adamw::piece_value(size_t b, const piece& pc) const {
  if (values_sharded()) return vals_[b].data() + (pc.flat - owned_[b].first);
  return params_[size_t(pc.param)]->value.f32() + pc.begin;
}

void distributed_adamw::pack_owned_values(int b, float* flat) const {
  pack_owned_into(b, flat, 0);
}

void distributed_adamw::pack_owned_into(int b, float* out, int64_t origin) const {
  for (auto& pc : pieces_[size_t(b)])
    std::memcpy(out + (pc.flat - origin), piece_value(size_t(b), pc),
                size_t(pc.end - pc.begin) * sizeof(float));
}

void distributed_adamw::pack_owned_values(int b, tensor& flat) const {
  MERAK_CHECK(flat.numel() == numel_[size_t(b)] && flat.type() == dtype::f32,
              "distributed optimizer: bucket {} of {} elements packed into {}", b,
              numel_[size_t(b)], flat.numel());
  if (flat.where().type == device::kind::cpu) return pack_owned_values(b, flat.f32());
  const auto [first, last] = owned_[size_t(b)];
  if (last <= first) return;
  tensor slice(shape_t{last - first});
  pack_owned_into(b, slice.f32(), first);
  copy_bytes(flat, size_t(first) * sizeof(float), slice, 0, slice.bytes());
}

void distributed_adamw::unpack_values(int b, const tensor& flat, dtype rounded_as) {
  MERAK_CHECK(flat.numel() == numel_[size_t(b)] && flat.type() == dtype::f32,
              "distributed optimizer: bucket {} of {} elements unpacked from {}", b,
              numel_[size_t(b)], flat.numel());
  for (int p : buckets_[size_t(b)]) {
    auto& prm = *params_[size_t(p)];
    const size_t at = size_t(offset_in_[size_t(p)]) * sizeof(float);
    if (rounded_as != dtype::f32 && values_sharded() && prm.reads == bf16_reads::rounded &&
        !prm.value.defined()) {
      // Through one float parameter on the device, converted (the bf16
      // all-gather's values are bf16 already: the same bits).
      tensor whole(prm.spec.shape, dtype::f32, where_);
      copy_bytes(whole, 0, flat, at, whole.bytes());
      if (!prm.lowp.defined() || prm.lowp.type() != rounded_as)
        prm.lowp = tensor(prm.spec.shape, rounded_as, where_);
      backend_for(where_).copy(prm.lowp, whole);
      continue;
    }
    if (!prm.value.defined()) prm.value = tensor(prm.spec.shape, dtype::f32, where_);
    copy_bytes(prm.value, 0, flat, at, prm.value.bytes());
  }
}

int64_t distributed_adamw::held_value_bytes(int b) const {
  int64_t n = 0;
  for (int p : buckets_[size_t(b)]) {
    const auto& prm = *params_[size_t(p)];
    n += int64_t(prm.value.bytes() + prm.lowp.bytes());
  }
  return n;
}

void distributed_adamw::keep_value_shards() {
  if (values_sharded()) return take_owned_values();
  vals_.assign(buckets_.size(), {});
  for (size_t b = 0; b < buckets_.size(); ++b)
    vals_[b].assign(size_t(owned_[b].second - owned_[b].first), 0.f);
  take_owned_values();
}

void distributed_adamw::take_owned_values() {
  MERAK_CHECK(values_sharded(), "distributed optimizer: no value shards kept");
  for (size_t b = 0; b < pieces_.size(); ++b)
    for (auto& pc : pieces_[b]) {
      auto& prm = *params_[size_t(pc.param)];
      MERAK_CHECK(prm.value.defined(), "distributed optimizer: the value of '{}' is released",
                  prm.spec.name);
      tensor staged;
      const tensor& host = prm.value.where().type == device::kind::cpu
                               ? prm.value
                               : (staged = prm.value.to(device::cpu()));
      std::memcpy(vals_[b].data() + (pc.flat - owned_[b].first), host.f32() + pc.begin,
                  size_t(pc.end - pc.begin) * sizeof(float));
    }
}

void distributed_adamw::release_values(int b) {
  MERAK_CHECK(values_sharded(), "distributed optimizer: values released without value shards");
  for (int p : buckets_[size_t(b)]) {
    params_[size_t(p)]->value = tensor();
    params_[size_t(p)]->lowp = tensor();
  }
}

const float* distributed_adamw::piece_values(int b, const piece& pc) const {
  return piece_value(size_t(b), pc);
}

std::vector<std::pair<size_t, size_t>> distributed_adamw::exact_ranges(int b) const {
  std::vector<std::pair<size_t, size_t>> out;
  for (int p : buckets_[size_t(b)]) {
    auto& prm = *params_[size_t(p)];
    if (prm.reads == bf16_reads::rounded) continue;
    const auto begin = size_t(offset_in_[size_t(p)]);
    const auto end = begin + size_t(shape_numel(prm.spec.shape));
    if (!out.empty() && out.back().second == begin)
      out.back().second = end;
    else
      out.emplace_back(begin, end);
  }
  std::sort(out.begin(), out.end());
  return out;
}

int64_t distributed_adamw::value_shard_bytes() const {
  int64_t n = 0;
  for (auto& v : vals_) n += int64_t(v.size() * sizeof(float));
  return n;
}

std::pair<const float*, const float*> distributed_adamw::piece_moments(int b,
                                                                      const piece& pc) const {
  const int64_t at = pc.flat - owned_[size_t(b)].first;
  return {m_[size_t(b)].f32() + at, v_[size_t(b)].f32() + at};
}

void distributed_adamw::set_moments(const std::vector<tensor>& m, const std::vector<tensor>& v) {
  MERAK_CHECK(m.size() == params_.size() && v.size() == params_.size(),
              "distributed optimizer: moments of {} and {} parameters for {}", m.size(), v.size(),
              params_.size());
  for (size_t p = 0; p < params_.size(); ++p) load_parameter(int(p), nullptr, m[p], v[p]);
}

void distributed_adamw::load_parameter(int p, const tensor* value, const tensor& m,
                                       const tensor& v) {
  auto& prm = *params_.at(size_t(p));
  const int64_t n = shape_numel(prm.spec.shape);
  MERAK_CHECK(m.numel() == n && v.numel() == n && (!value || value->numel() == n),
              "distributed optimizer: '{}' loaded with {}, {} and {} elements, not {}",
              prm.spec.name, m.numel(), v.numel(), value ? value->numel() : n, n);
  const size_t b = size_t(bucket_of_[size_t(p)]);
  for (auto& pc : pieces_[b]) {
    if (pc.param != p) continue;
    const int64_t at = pc.flat - owned_[b].first, k = pc.end - pc.begin;
    std::memcpy(m_[b].f32() + at, m.f32() + pc.begin, size_t(k) * sizeof(float));
    std::memcpy(v_[b].f32() + at, v.f32() + pc.begin, size_t(k) * sizeof(float));
    if (value && values_sharded())
      std::memcpy(vals_[b].data() + at, value->f32() + pc.begin, size_t(k) * sizeof(float));
  }
}

int64_t distributed_adamw::moment_bytes() const {
  int64_t n = 0;
  for (size_t b = 0; b < m_.size(); ++b) n += m_[b].bytes() + v_[b].bytes();
  return n;
}

}  // namespace merak::model
