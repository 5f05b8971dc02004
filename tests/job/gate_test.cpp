#include <catch2/catch.hpp>

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "job/auth.hpp"
#include "job/gate.hpp"
#include "job/socket_io.hpp"
#include "core/error.hpp"
#include "echo_service.hpp"

using namespace merak::job;
using namespace std::chrono_literals;
using merak::test::echo_service;

TEST_CASE("a gate relays an authenticated connection both ways", "[job][gate]") {
  echo_service echo;
  gate_server gate("127.0.0.1", 0, echo.port(), job_credentials{"tok", nullptr}, "mesh",
                   "test gate");
  gate_tunnel tunnel("127.0.0.1", gate.port(), job_credentials{"tok", nullptr}, "mesh", 3000ms,
                     "test", "the gate");
  // 1 MiB written while it is read back: the relay must not deadlock.
  CHECK(merak::test::echo_round_trip(tunnel.local_port(), 1 << 20, 10s));
  CHECK(gate.admitted() == 1);
  CHECK(echo.connections == 1);
}

TEST_CASE("a gate lets nothing through before the token is proved", "[job][gate]") {
  echo_service echo;
  gate_server gate("127.0.0.1", 0, echo.port(), job_credentials{"tok", nullptr}, "svm",
                   "test gate");
  CHECK_THROWS_WITH(
      gate_tunnel("127.0.0.1", gate.port(), job_credentials{"bad", nullptr}, "svm", 3000ms,
                  "svm worker 1", "the gate"),
      Catch::Contains("svm worker 1: the gate refused this process: wrong job token"));
  CHECK_THROWS_WITH(gate_tunnel("127.0.0.1", gate.port(), job_credentials{"tok", nullptr}, "mesh",
                                3000ms, "process 1", "the gate"),
                    Catch::Contains("'svm' service, not 'mesh'"));
  // What CAF's protocol would read as a 4 GiB message, and bare garbage.
  const auto a = resolve_ipv4("127.0.0.1", gate.port(), "t");
  unique_fd big = connect_tcp(a, net_clock::now() + 3s, "t", "gate");
  std::string frame;
  put_u64(frame, uint64_t{1} << 32);
  frame += std::string(64, 'x');
  ::send(big.get(), frame.data(), frame.size(), MSG_NOSIGNAL);
  unique_fd junk = connect_tcp(a, net_clock::now() + 3s, "t", "gate");
  ::send(junk.get(), "GET / HTTP/1.0\r\n\r\n", 18, MSG_NOSIGNAL);
  // Both are dropped by the gate; a rightful tunnel still gets through.
  gate_tunnel ok("127.0.0.1", gate.port(), job_credentials{"tok", nullptr}, "svm", 3000ms, "t",
                 "the gate");
  CHECK(merak::test::echo_round_trip(ok.local_port(), 4, 3s));
  CHECK(echo.connections == 1);
  CHECK(gate.admitted() == 1);
  const auto until = net_clock::now() + 3s;
  while (gate.dropped() < 4 && net_clock::now() < until) std::this_thread::sleep_for(10ms);
  CHECK(gate.dropped() == 4);
  auto refused = gate.refusals();
  REQUIRE(!refused.empty());
  CHECK_THAT(refused[0], Catch::Contains("127.0.0.1:") && Catch::Contains("wrong job token"));
}

TEST_CASE("closing one end of a relayed connection closes the other", "[job][gate]") {
  unique_fd service = listen_tcp("127.0.0.1", 0, "svc");
  gate_server gate("127.0.0.1", 0, bound_port(service.get()), job_credentials{"tok", nullptr},
                   "mesh", "test gate");
  gate_tunnel tunnel("127.0.0.1", gate.port(), job_credentials{"tok", nullptr}, "mesh", 3000ms, "t",
                     "the gate");
  unique_fd c = connect_tcp(resolve_ipv4("127.0.0.1", tunnel.local_port(), "t"),
                            net_clock::now() + 3s, "t", "tunnel");
  REQUIRE(wait_fd(service.get(), POLLIN, net_clock::now() + 3s));
  unique_fd s(::accept(service.get(), nullptr, nullptr));
  REQUIRE(s);
  s.reset();  // the service's end goes away
  char b;
  REQUIRE(wait_fd(c.get(), POLLIN, net_clock::now() + 3s));
  CHECK(::recv(c.get(), &b, 1, 0) == 0);
}

TEST_CASE("a busy acceptor keeps new peers queued instead of dropping them", "[job][gate]") {
  // One handshake at a time and two silent connections ahead: the three
  // real clients wait in the listen queue (or retry) and all get in.
  unique_fd lst = listen_tcp("127.0.0.1", 0, "test");
  const int port = bound_port(lst.get());
  auth_acceptor acceptor(lst.get(), job_credentials{"tok", nullptr}, "mesh", 300ms, 1);
  const auto a = resolve_ipv4("127.0.0.1", port, "t");
  unique_fd s1 = connect_tcp(a, net_clock::now() + 2s, "t", "acceptor");
  unique_fd s2 = connect_tcp(a, net_clock::now() + 2s, "t", "acceptor");
  std::vector<std::thread> clients;
  std::atomic<int> in{0};
  for (int i = 0; i < 3; ++i)
    clients.emplace_back([&, i] {
      stream c =
          connect_authenticated(a, job_credentials{"tok", nullptr}, "mesh", std::to_string(i),
                                net_clock::now() + 5s, "client", "acceptor");
      ++in;
    });
  std::vector<std::string> admitted;
  const auto until = net_clock::now() + 5s;
  while (admitted.size() < 3 && net_clock::now() < until)
    if (auto x = acceptor.next(until, [](const std::string&) { return ""; }))
      admitted.push_back(x->payload);
  for (auto& t : clients) t.join();
  CHECK(in == 3);
  std::sort(admitted.begin(), admitted.end());
  CHECK(admitted == std::vector<std::string>{"0", "1", "2"});
  CHECK(acceptor.dropped() >= 2);  // the silent ones, after their 300 ms
}
