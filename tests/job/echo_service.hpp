#pragma once
// A loopback TCP service for the gate tests: echoes every byte back, one
// connection at a time, and counts the connections it served.

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "job/socket_io.hpp"

namespace merak::test {

struct echo_service {
  job::unique_fd listener = job::listen_tcp("127.0.0.1", 0, "echo");
  std::atomic<int> connections{0};
  std::atomic<bool> stop{false};
  std::thread thread{[this] {
    using namespace std::chrono_literals;
    using job::net_clock;
    using job::stream;
    while (!stop) {
      if (!job::wait_fd(listener.get(), POLLIN, net_clock::now() + 50ms)) continue;
      stream c(job::unique_fd(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK)));
      if (!c) continue;
      ++connections;
      char buf[4096];
      for (;;) {
        size_t n = 0;
        const auto r = c.read_some(buf, sizeof buf, n);
        if (r == stream::io::would_block && job::wait_fd(c.fd(), POLLIN, net_clock::now() + 5s))
          continue;
        if (r != stream::io::done) break;
        job::write_all(c, buf, n, net_clock::now() + 5s, "echo", "client");
      }
    }
  }};
  int port() const { return job::bound_port(listener.get()); }
  ~echo_service() {
    stop = true;
    thread.join();
  }
};

// Writes `bytes` patterned bytes to the loopback `port` (a tunnel to an
// echo service) while reading them back, so a relay that cannot move both
// ways at once deadlocks; true when they came back unchanged.
inline bool echo_round_trip(int port, size_t bytes, std::chrono::seconds within) {
  using job::net_clock;
  const auto deadline = net_clock::now() + within;
  job::stream c(
      job::connect_tcp(job::resolve_ipv4("127.0.0.1", port, "t"), deadline, "t", "tunnel"));
  std::string sent(bytes, '\0');
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = char(i * 131 % 251);
  std::thread writer(
      [&] { job::write_all(c, sent.data(), sent.size(), deadline, "t", "tunnel"); });
  std::string got(sent.size(), '\0');
  job::read_all(c, got.data(), got.size(), deadline, "t", "tunnel");
  writer.join();
  return got == sent;
}

}  // namespace merak::test
