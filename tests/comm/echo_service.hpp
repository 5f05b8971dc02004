#pragma once
// A loopback TCP service for the gate tests: echoes every byte back, one
// connection at a time, and counts the connections it served.

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "comm/socket_io.hpp"

namespace merak::test {

struct echo_service {
  comm::unique_fd listener = comm::listen_tcp("127.0.0.1", 0, "echo");
  std::atomic<int> connections{0};
  std::atomic<bool> stop{false};
  std::thread thread{[this] {
    using namespace std::chrono_literals;
    using comm::net_clock;
    using comm::stream;
    while (!stop) {
      if (!comm::wait_fd(listener.get(), POLLIN, net_clock::now() + 50ms)) continue;
      stream c(comm::unique_fd(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK)));
      if (!c) continue;
      ++connections;
      char buf[4096];
      for (;;) {
        size_t n = 0;
        const auto r = c.read_some(buf, sizeof buf, n);
        if (r == stream::io::would_block && comm::wait_fd(c.fd(), POLLIN, net_clock::now() + 5s))
          continue;
        if (r != stream::io::done) break;
        comm::write_all(c, buf, n, net_clock::now() + 5s, "echo", "client");
      }
    }
  }};
  int port() const { return comm::bound_port(listener.get()); }
  ~echo_service() {
    stop = true;
    thread.join();
  }
};

// Writes `bytes` patterned bytes to the loopback `port` (a tunnel to an
// echo service) while reading them back, so a relay that cannot move both
// ways at once deadlocks; true when they came back unchanged.
inline bool echo_round_trip(int port, size_t bytes, std::chrono::seconds within) {
  using comm::net_clock;
  const auto deadline = net_clock::now() + within;
  comm::stream c(
      comm::connect_tcp(comm::resolve_ipv4("127.0.0.1", port, "t"), deadline, "t", "tunnel"));
  std::string sent(bytes, '\0');
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = char(i * 131 % 251);
  std::thread writer(
      [&] { comm::write_all(c, sent.data(), sent.size(), deadline, "t", "tunnel"); });
  std::string got(sent.size(), '\0');
  comm::read_all(c, got.data(), got.size(), deadline, "t", "tunnel");
  writer.join();
  return got == sent;
}

}  // namespace merak::test
