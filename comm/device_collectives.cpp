// The registries of the device collectives and of the device links
// (comm/device_collectives.hpp, comm/device_links.hpp).
#include "comm/device_collectives.hpp"
#include "comm/device_links.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>
#include <vector>

#include "comm/collectives.hpp"
#include "core/error.hpp"
#include "model/backend.hpp"

namespace merak::comm {
namespace {

// Makers by device kind, for the collectives and for the links.
template <class Maker>
struct maker_registry {
  std::mutex mu;
  std::map<model::device::kind, Maker> makers;

  void put(model::device::kind k, Maker make) {
    std::lock_guard lock(mu);
    if (make)
      makers[k] = std::move(make);
    else
      makers.erase(k);
  }
  // The maker for `k`, or an empty one.
  Maker get(model::device::kind k) {
    std::lock_guard lock(mu);
    auto it = makers.find(k);
    return it == makers.end() ? Maker() : it->second;
  }
};

maker_registry<device_collectives_maker>& collectives_registry() {
  static maker_registry<device_collectives_maker> r;
  return r;
}

maker_registry<device_link_maker>& links_registry() {
  static maker_registry<device_link_maker> r;
  return r;
}

bool turned_off() {
  const char* v = std::getenv("MERAK_DEVICE_COLLECTIVES");
  return v && std::string_view(v) == "0";
}

// The maker registered for device kind `k`, or an empty one for the host
// or with device collectives turned off.
template <class Maker>
Maker maker_for(maker_registry<Maker>& registry, model::device::kind k) {
  return k == model::device::kind::cpu || turned_off() ? Maker() : registry.get(k);
}

// The parts of `exact` inside [b, e), in order.
std::vector<std::pair<size_t, size_t>> exact_within(
    size_t b, size_t e, std::span<const std::pair<size_t, size_t>> exact) {
  std::vector<std::pair<size_t, size_t>> out;
  for (auto [lo, hi] : exact)
    if (std::max(lo, b) < std::min(hi, e)) out.emplace_back(std::max(lo, b), std::min(hi, e));
  return out;
}

// dst[at, at + n) <- src[from, from + n) converted to dst's type (f32 and
// bf16 either way), through shard-sized tensors on the device.
void convert_range(model::tensor& dst, size_t at, const model::tensor& src, size_t from,
                   size_t n) {
  if (n == 0) return;
  const auto where = dst.where();
  model::tensor in(model::shape_t{int64_t(n)}, src.type(), where);
  model::tensor out(model::shape_t{int64_t(n)}, dst.type(), where);
  const size_t in_elem = model::dtype_size(src.type()), out_elem = model::dtype_size(dst.type());
  model::copy_bytes(in, 0, src, from * in_elem, n * in_elem);
  model::backend_for(where).copy(out, in);
  model::copy_bytes(dst, at * out_elem, out, 0, n * out_elem);
}

}  // namespace

void allgather_shards_bf16(device_collectives& dc, const transport& group, model::tensor& x,
                           std::span<const std::pair<size_t, size_t>> exact) {
  MERAK_CHECK(x.type() == model::dtype::f32, "device allgather_shards_bf16: a float tensor");
  const size_t n = size_t(x.numel());
  check_exact_ranges(exact, n, "device allgather_shards_bf16");
  const int P = group.size(), r = group.rank();
  if (P == 1 || n == 0) return;
  const auto where = x.where();
  // The bucket as bf16, this member's shard rounded in.
  model::tensor half(model::shape_t{int64_t(n)}, model::dtype::bf16, where);
  {
    auto [b, e] = shard_range(n, P, r);
    convert_range(half, b, x, b, e - b);
  }
  dc.allgather_shards(half);
  // The exact ranges' floats, shard by shard in slots of the most any holds.
  std::vector<std::vector<std::pair<size_t, size_t>>> pieces;
  size_t most = 0;
  for (int k = 0; k < P; ++k) {
    auto [b, e] = shard_range(n, P, k);
    pieces.push_back(exact_within(b, e, exact));
    size_t count = 0;
    for (auto [lo, hi] : pieces.back()) count += hi - lo;
    most = std::max(most, count);
  }
  model::tensor floats;
  if (most > 0) {
    floats = model::tensor(model::shape_t{int64_t(most) * P}, model::dtype::f32, where);
    size_t at = size_t(r) * most;
    for (auto [lo, hi] : pieces[size_t(r)]) {
      model::copy_bytes(floats, at * 4, x, lo * 4, (hi - lo) * 4);
      at += hi - lo;
    }
    dc.allgather_shards(floats);
  }
  // The other shards: widened, then their exact floats over them.
  for (int k = 0; k < P; ++k) {
    if (k == r) continue;
    auto [b, e] = shard_range(n, P, k);
    convert_range(x, b, half, b, e - b);
    size_t at = size_t(k) * most;
    for (auto [lo, hi] : pieces[size_t(k)]) {
      model::copy_bytes(x, lo * 4, floats, at * 4, (hi - lo) * 4);
      at += hi - lo;
    }
  }
}

void register_device_collectives(model::device::kind k, device_collectives_maker make) {
  collectives_registry().put(k, std::move(make));
}

bool has_device_collectives(model::device::kind k) {
  return bool(maker_for(collectives_registry(), k));
}

std::unique_ptr<device_collectives> make_device_collectives(
    transport& group, model::device d, tag_t tag, const device_collectives_options& options) {
  const auto make = maker_for(collectives_registry(), d.type);
  return make ? make(group, d, tag, options) : nullptr;
}

void register_device_links(model::device::kind k, device_link_maker make) {
  links_registry().put(k, std::move(make));
}

channel_links make_device_links(transport& t, const std::vector<int>& peers, model::device d) {
  channel_links out;
  const auto make = maker_for(links_registry(), d.type);
  if (!make) return out;
  // Pairs in ascending (lower rank, higher rank) order: this process's
  // pairs are then in ascending peer order.
  std::vector<int> order(peers.begin(), peers.end());
  std::sort(order.begin(), order.end());
  order.erase(std::unique(order.begin(), order.end()), order.end());
  for (int p : order) {
    MERAK_CHECK(p >= 0 && p < t.size() && p != t.rank(), "device links: peer {} of {} (rank {})", p,
                t.size(), t.rank());
    out[p] = make(t, p, d);
  }
  return out;
}

}  // namespace merak::comm
