#include "comm/network_interface.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

namespace merak::comm {

std::string interface_of(const std::string& addr) {
  in_addr want{};
  if (::inet_pton(AF_INET, addr.c_str(), &want) != 1) return {};
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return {};
  std::string name;
  for (ifaddrs* i = all; i && name.empty(); i = i->ifa_next)
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
        reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == want.s_addr)
      name = i->ifa_name;
  ::freeifaddrs(all);
  return name;
}

}  // namespace merak::comm
