#pragma once
// The network interfaces of this host, for a transport that must pin its
// traffic to the interface the job's processes reach each other by.

#include <string>

namespace merak::comm {

// The name of the network interface that holds the IPv4 address `addr`
// ("eth0"; "lo" for 127.0.0.1), or "" when no interface of this host does.
std::string interface_of(const std::string& addr);

}  // namespace merak::comm
