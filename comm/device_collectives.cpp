// The registries of the device collectives and of the device links
// (comm/device_collectives.hpp, comm/device_links.hpp).
#include "comm/device_collectives.hpp"
#include "comm/device_links.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>

#include "core/error.hpp"

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

}  // namespace

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
