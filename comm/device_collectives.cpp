#include "comm/device_collectives.hpp"

#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>

namespace merak::comm {
namespace {

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

std::map<model::device::kind, device_collectives_maker>& registry() {
  static std::map<model::device::kind, device_collectives_maker> r;
  return r;
}

bool turned_off() {
  const char* v = std::getenv("MERAK_DEVICE_COLLECTIVES");
  return v && std::string_view(v) == "0";
}

}  // namespace

void register_device_collectives(model::device::kind k, device_collectives_maker make) {
  std::lock_guard lock(registry_mutex());
  if (make)
    registry()[k] = std::move(make);
  else
    registry().erase(k);
}

bool has_device_collectives(model::device::kind k) {
  if (k == model::device::kind::cpu || turned_off()) return false;
  std::lock_guard lock(registry_mutex());
  return registry().count(k) != 0;
}

std::unique_ptr<device_collectives> make_device_collectives(
    transport& group, model::device d, tag_t tag, const device_collectives_options& options) {
  if (!has_device_collectives(d.type)) return nullptr;
  device_collectives_maker make;
  {
    std::lock_guard lock(registry_mutex());
    make = registry().at(d.type);
  }
  return make(group, d, tag, options);
}

}  // namespace merak::comm
