#pragma once
// Mutual authentication of a job's connections by its token, which never
// crosses the network (docs/security.md). Both ends prove they hold the
// token with an HMAC-SHA256 over fresh nonces from both sides, so a
// recorded exchange cannot be replayed and a listener that does not hold
// the token cannot pass itself off as the job's rank 0.
//
// Frames (job/socket_io.hpp: u64 length, then the body), in order:
//   challenge (server -> client) = "MERAKAU1" u8 n, purpose[n], nonce_s[32]
//   hello     (client -> server) = "MERAKAU1" nonce_c[32] u32 m, payload[m], mac_c[32]
//   verdict   (server -> client) = u8 1, mac_s[32]   (accepted)
//                                | u8 0, reason text (refused)
//   mac_c = HMAC(token, "client" 0 purpose 0 nonce_s nonce_c payload)
//   mac_s = HMAC(token, "server" 0 purpose 0 nonce_c nonce_s payload)
// `purpose` names the service ("bootstrap", "svm", "mesh"): a proof made
// for one is worthless at another. The payload is the client's claim (its
// rank, say), covered by both MACs. Every length is bounded before anything
// is allocated; a hello is at most kmax_auth_frame bytes.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "job/socket_io.hpp"
#include "job/tls.hpp"

namespace merak::job {

// What the connections of a job prove: the token, and with TLS the
// certificates (job/tls.hpp) of the session the handshake then runs in.
struct job_credentials {
  std::string token;
  std::shared_ptr<const tls_context> tls;  // null: in clear
};

constexpr size_t kauth_nonce = 32;
constexpr size_t kauth_mac = 32;
constexpr uint64_t kmax_auth_frame = 4096;

// HMAC-SHA256 of `data` under `key`: 32 bytes.
std::string hmac_sha256(std::string_view key, std::string_view data);
// `n` bytes from the kernel's random source. Throws merak::error.
std::string random_bytes(size_t n);
// A random job token (hex, from /dev/urandom).
std::string random_token();

// Reads a job token from a file, as --token-file and MERAK_JOB_TOKEN_FILE
// do (a token on the command line is visible to every user in `ps`). The
// file must be a regular file that neither group nor others may read or
// write (mode 0600 or 0400), at most 4 KiB; one trailing newline is
// dropped. Throws merak::error naming the file.
std::string read_token_file(const std::string& path);

// The server's side of one connection's handshake: pure, no I/O.
class auth_server {
 public:
  auth_server(std::string token, std::string purpose);  // draws the server nonce
  const std::string& challenge() const { return challenge_; }
  // Checks a hello body. True: the client holds the token; payload() is its
  // claim. False: `reason` says why (sent back to the client).
  bool check(std::string_view hello, std::string& reason);
  const std::string& payload() const { return payload_; }
  // The verdict bodies. accept() proves the server holds the token.
  std::string accept() const;
  static std::string refuse(std::string_view reason);

 private:
  std::string token_, purpose_, nonce_s_, nonce_c_, payload_, challenge_;
};

// The client's side: pure, no I/O.
class auth_client {
 public:
  auth_client(std::string token, std::string purpose, std::string payload);
  // The hello body answering a challenge body. Throws merak::error saying
  // what is wrong with the challenge (not merak's, another service).
  std::string answer(std::string_view challenge);
  // Empty when the verdict accepts this client and proves the server holds
  // the token; otherwise why not (a refusal's reason is the server's
  // unproven text: printable ASCII only, cut to 300 bytes).
  std::string verdict(std::string_view v) const;

 private:
  std::string token_, purpose_, payload_, nonce_s_, nonce_c_;
};

// The client's handshake on a connected stream (after TLS's, if any),
// blocking until `deadline`. True when admitted; false when the server
// closed the connection before its verdict (busy: try again). Throws
// merak::error naming `self` and `who` when the server refuses this client
// (with its reason), cannot prove the token, or times out.
bool authenticate_client(stream& s, const std::string& token, const std::string& purpose,
                         const std::string& payload, net_clock::time_point deadline,
                         const std::string& self, const std::string& who);

// Connects to `a`, runs TLS's handshake when `c.tls` is set, then merak's;
// again while the server closes the connection before its verdict, until
// `deadline`. The admitted stream (non-blocking), or merak::error as
// connect_tcp, tls_client and authenticate_client.
stream connect_authenticated(const sockaddr_in& a, const job_credentials& c,
                             const std::string& purpose, const std::string& payload,
                             net_clock::time_point deadline, const std::string& self,
                             const std::string& who);

// Accepts connections on a listening socket and runs the server side of the
// handshakes (TLS's when the credentials carry it, then merak's) on all of
// them at once. Each connection has its own deadline
// (`per_connection`), so silent or slow connections cannot hold up the
// job's own. At most `max_pending` are in the handshake at a time; further
// ones wait in the kernel's listen queue (none is pushed out). One thread
// at a time.
class auth_acceptor {
 public:
  auth_acceptor(int listen_fd, job_credentials c, std::string purpose,
                std::chrono::milliseconds per_connection = std::chrono::milliseconds(5000),
                size_t max_pending = 64);
  ~auth_acceptor();

  struct admitted {
    stream s;             // non-blocking, TCP_NODELAY
    std::string payload;  // the client's claim
    std::string peer;     // "ADDR:PORT"
  };
  // `decide` returns "" to admit a client with this payload, or the reason
  // it is refused (sent to the client).
  using decide_fn = std::function<std::string(const std::string& payload)>;
  // The next admitted connection, or nullopt at `deadline` or when `stop_fd`
  // (when >= 0) becomes readable.
  std::optional<admitted> next(net_clock::time_point deadline, const decide_fn& decide,
                               int stop_fd = -1);
  // Connections dropped so far: refused, silent past their deadline, closed,
  // malformed or failing TLS.
  size_t dropped() const { return dropped_; }  // any thread
  // Called (on next()'s thread) for each connection refused with a verdict:
  // its address and the reason it was given.
  std::function<void(const std::string& peer, const std::string& reason)> on_refused;

 private:
  struct pending;
  void accept_new();
  bool advance(pending& p, const decide_fn& decide, std::optional<admitted>& out);

  int listen_fd_;
  job_credentials creds_;
  std::string purpose_;
  std::chrono::milliseconds per_connection_;
  size_t max_pending_;
  std::vector<pending> pending_;
  std::atomic<size_t> dropped_{0};
  net_clock::time_point listener_paused_until_{};  // after EMFILE
};

}  // namespace merak::job
