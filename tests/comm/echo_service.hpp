#pragma once
// A loopback TCP service for the gate tests: echoes every byte back, one
// connection at a time, and counts the connections it served.

#include <sys/socket.h>

#include <atomic>
#include <chrono>
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

}  // namespace merak::test
