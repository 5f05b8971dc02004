#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "job/auth.hpp"
#include "job/gate.hpp"
#include "job/socket_io.hpp"
#include "job/tls.hpp"
#include "core/error.hpp"
#include "echo_service.hpp"
#include "test_pki.hpp"

using namespace merak::job;
using merak::test::test_pki;
using namespace std::chrono_literals;
using merak::test::echo_service;

namespace {

job_credentials creds(const std::string& token, const tls_files& f) {
  return {token, make_tls(f)};
}

// A TCP forwarder between a client and `target` that keeps a copy of every
// byte it forwards: what someone on the network would see.
struct wiretap {
  unique_fd listener = listen_tcp("127.0.0.1", 0, "tap");
  int target;
  std::string seen;
  std::thread thread;
  explicit wiretap(int target_port) : target(target_port) {
    thread = std::thread([this] {
      if (!wait_fd(listener.get(), POLLIN, net_clock::now() + 10s)) return;
      unique_fd a(::accept(listener.get(), nullptr, nullptr));
      unique_fd b = connect_tcp(resolve_ipv4("127.0.0.1", target, "t"), net_clock::now() + 3s,
                                "tap", "target");
      pollfd fds[2] = {{a.get(), POLLIN, 0}, {b.get(), POLLIN, 0}};
      char buf[4096];
      for (bool open = true; open && ::poll(fds, 2, 10000) > 0;)
        for (int i = 0; i < 2 && open; ++i)
          if (fds[i].revents) {
            const ssize_t n = ::recv(fds[i].fd, buf, sizeof buf, MSG_DONTWAIT);
            if (n > 0) {
              seen.append(buf, size_t(n));
              ::send(fds[1 - i].fd, buf, size_t(n), MSG_NOSIGNAL);
            } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
              open = false;
            }
          }
    });
  }
  int port() const { return bound_port(listener.get()); }
  ~wiretap() {
    if (thread.joinable()) thread.join();
  }
};

// Sends `text` through a tunnel to an echo service behind a gate, with a
// wiretap between tunnel and gate; returns what the wiretap saw.
std::string tapped_echo(const job_credentials& server, const job_credentials& client,
                        const std::string& text) {
  echo_service echo;
  gate_server gate("127.0.0.1", 0, echo.port(), server, "mesh", "test gate");
  wiretap tap(gate.port());
  std::string seen;
  {
    gate_tunnel tunnel("127.0.0.1", tap.port(), client, "mesh", 5000ms, "t", "the gate");
    stream c(connect_tcp(resolve_ipv4("127.0.0.1", tunnel.local_port(), "t"), net_clock::now() + 3s,
                         "t", "tunnel"));
    write_all(c, text.data(), text.size(), net_clock::now() + 5s, "t", "tunnel");
    std::string back(text.size(), '\0');
    read_all(c, back.data(), back.size(), net_clock::now() + 5s, "t", "tunnel");
    CHECK(back == text);
  }
  gate.shutdown(net_clock::now() + 1s);
  tap.thread.join();
  return tap.seen;
}

}  // namespace

TEST_CASE("under TLS a gate relays both ways and nothing readable crosses the network",
          "[job][tls]") {
  test_pki pki({"a", "b"});
  const std::string secret = "activation bytes 0123456789 of the job, not for the network";
  // In clear the wiretap reads merak's handshake and the relayed bytes.
  const std::string clear = tapped_echo({"tok", nullptr}, {"tok", nullptr}, secret);
  CHECK(clear.find("MERAKAU1") != std::string::npos);
  CHECK(clear.find(secret) != std::string::npos);
  // Under TLS it reads neither.
  const std::string tls =
      tapped_echo(creds("tok", pki.files("a")), creds("tok", pki.files("b")), secret);
  CHECK(tls.size() > secret.size());
  CHECK(tls.find("MERAKAU1") == std::string::npos);
  CHECK(tls.find(secret) == std::string::npos);
  CHECK(tls.find("tok") == std::string::npos);
}

TEST_CASE("a gate under TLS relays a large stream without loss", "[job][tls]") {
  test_pki pki({"a", "b"});
  echo_service echo;
  gate_server gate("127.0.0.1", 0, echo.port(), creds("tok", pki.files("a")), "svm", "gate");
  gate_tunnel tunnel("127.0.0.1", gate.port(), creds("tok", pki.files("b")), "svm", 3000ms, "t",
                     "the gate");
  CHECK(merak::test::echo_round_trip(tunnel.local_port(), 4 << 20, 20s));
  CHECK(gate.admitted() == 1);
}

TEST_CASE("a certificate of another CA is refused in the TLS handshake", "[job][tls]") {
  test_pki job({"gate", "worker"});
  test_pki rogue({"worker"});
  echo_service echo;
  gate_server gate("127.0.0.1", 0, echo.port(), creds("tok", job.files("gate")), "svm", "gate");
  // The rogue trusts only its own CA: it refuses the gate's certificate.
  CHECK_THROWS_WITH(gate_tunnel("127.0.0.1", gate.port(), creds("tok", rogue.files("worker")),
                                "svm", 3000ms, "svm worker 1", "the gate"),
                    Catch::Contains("svm worker 1: TLS handshake with the gate failed") &&
                        Catch::Contains("certificate verify failed"));
  // It trusts the job's CA but shows its own certificate: the gate refuses it,
  // even with the right token.
  tls_files mixed = rogue.files("worker");
  mixed.ca = job.files("worker").ca;
  CHECK_THROWS_WITH(gate_tunnel("127.0.0.1", gate.port(), creds("tok", mixed), "svm", 3000ms,
                                "svm worker 2", "the gate"),
                    Catch::Contains("svm worker 2") && Catch::Contains("the gate"));
  // The job's own worker gets through.
  gate_tunnel ok("127.0.0.1", gate.port(), creds("tok", job.files("worker")), "svm", 3000ms, "t",
                 "the gate");
  CHECK(merak::test::echo_round_trip(ok.local_port(), 4, 3s));
  CHECK(gate.admitted() == 1);
  const auto until = net_clock::now() + 3s;
  while (gate.dropped() < 2 && net_clock::now() < until) std::this_thread::sleep_for(10ms);
  CHECK(gate.dropped() == 2);
}

TEST_CASE("TLS on one side only ends with an error, not a hang", "[job][tls]") {
  test_pki pki({"a"});
  echo_service echo;
  {
    gate_server gate("127.0.0.1", 0, echo.port(), creds("tok", pki.files("a")), "svm", "gate");
    const auto start = net_clock::now();
    CHECK_THROWS_WITH(
        gate_tunnel("127.0.0.1", gate.port(), {"tok", nullptr}, "svm", 1500ms, "t", "the gate"),
        Catch::Contains("the gate"));
    CHECK(net_clock::now() - start < 5s);
  }
  gate_server plain("127.0.0.1", 0, echo.port(), {"tok", nullptr}, "svm", "gate");
  CHECK_THROWS_WITH(gate_tunnel("127.0.0.1", plain.port(), creds("tok", pki.files("a")), "svm",
                                3000ms, "t", "the gate"),
                    Catch::Contains("TLS handshake with the gate failed"));
}

TEST_CASE("TLS files are checked before a job starts, naming the file", "[job][tls]") {
  test_pki pki({"a", "b"});
  const tls_files a = pki.files("a");
  CHECK_NOTHROW(tls_context(a));
  CHECK_THROWS_WITH(
      tls_context({a.cert, a.key, pki.dir() + "/none.pem"}),
      Catch::Contains("TLS CA '" + pki.dir() + "/none.pem'") && Catch::Contains("No such file"));
  CHECK_THROWS_WITH(tls_context({a.cert, pki.files("b").key, a.ca}),
                    Catch::Contains("TLS key '" + pki.files("b").key + "' (of certificate '" +
                                    a.cert + "'): key values mismatch"));
  ::chmod(a.key.c_str(), 0644);
  CHECK_THROWS_WITH(tls_context(a), Catch::Contains("may be read by group or others (mode 0644)"));
  ::chmod(a.key.c_str(), 0600);
  {
    std::ofstream(pki.dir() + "/junk.pem") << "not a certificate\n";
    CHECK_THROWS_WITH(tls_context({pki.dir() + "/junk.pem", a.key, a.ca}),
                      Catch::Contains("TLS certificate '" + pki.dir() + "/junk.pem'"));
  }
  CHECK_THROWS_WITH(tls_context({a.cert, "", a.ca}), Catch::Contains("the key is missing"));
  auto env = [](const char* v) -> const char* {
    return std::string(v) == "MERAK_TLS_CERT" ? "/x.pem" : nullptr;
  };
  CHECK_THROWS_WITH(tls_files_from_env(env),
                    Catch::Contains("MERAK_TLS_CERT, MERAK_TLS_KEY and MERAK_TLS_CA") &&
                        Catch::Contains("the key and the CA are missing"));
  CHECK_FALSE(tls_files_from_env([](const char*) -> const char* { return nullptr; }).enabled());
}
