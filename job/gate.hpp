#pragma once
// An authenticating gate in front of a TCP service that has no
// authentication of its own: the CAF middleman's port, whose protocol reads
// a length and allocates before it knows who is talking (docs/security.md).
// The service listens on loopback only. A gate_server listens where other
// hosts reach it, runs the handshake of job/auth.hpp on every connection
// at once, and relays each admitted one to the service. On the other side a
// gate_tunnel authenticates to the remote gate first and then offers a
// loopback port for one local connection (the CAF client's), which it
// relays. Nothing reaches the service before the peer proved the job token,
// and the token never crosses the network. With TLS in the credentials
// (job/tls.hpp), the network side of every relayed connection is a TLS
// session; loopback stays in clear.
//
// Each relayed connection has a thread of its own that moves bytes both
// ways through non-blocking sockets; closing one end closes the other.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "job/auth.hpp"

namespace merak::job {

class gate_server {
 public:
  // Listens on bind_host:port (0: the kernel's pick) and relays admitted
  // connections to 127.0.0.1:target_port. `purpose` names the service in
  // the handshake ("svm", "mesh"); `self` names this side in errors.
  // Throws merak::error when it cannot listen.
  gate_server(const std::string& bind_host, int port, int target_port, job_credentials creds,
              std::string purpose, std::string self);
  // shutdown(now + 2 s): destroy the gate after the service closed its
  // sockets, so that its connections end by themselves.
  ~gate_server();
  // Stops accepting; relayed connections get until `linger_until` to close
  // by themselves, then are closed. Several gates and tunnels shut down
  // with one deadline wait at most that long together. Idempotent.
  void shutdown(std::chrono::steady_clock::time_point linger_until);
  gate_server(const gate_server&) = delete;
  gate_server& operator=(const gate_server&) = delete;

  int port() const;
  // Stops admitting new connections; relayed ones go on.
  void close_listener();
  // Connections admitted, and dropped (refused, silent, malformed), so far.
  size_t admitted() const;
  size_t dropped() const;
  // The last few refusals, "ADDR:PORT: reason", oldest first.
  std::vector<std::string> refusals() const;

 private:
  struct impl;
  std::unique_ptr<impl> p_;
};

class gate_tunnel {
 public:
  // Connects to the gate at host:port (retrying until `timeout` while it is
  // not yet listening) and authenticates; then listens on loopback for one
  // connection and relays it. Throws merak::error naming `who` when the gate
  // is unreachable, refuses this process (with its reason) or cannot prove
  // it holds the token.
  gate_tunnel(const std::string& host, int port, const job_credentials& creds, std::string purpose,
              std::chrono::milliseconds timeout, std::string self, std::string who);
  ~gate_tunnel();  // shutdown(now + 2 s)
  // As gate_server::shutdown.
  void shutdown(std::chrono::steady_clock::time_point linger_until);
  gate_tunnel(const gate_tunnel&) = delete;
  gate_tunnel& operator=(const gate_tunnel&) = delete;

  int local_port() const;  // connect here (127.0.0.1)

 private:
  struct impl;
  std::unique_ptr<impl> p_;
};

}  // namespace merak::job
