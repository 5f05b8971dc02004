#pragma once
// TCP helpers with deadlines, shared by the bootstrap, the authenticated
// handshake and the gate (job/auth.hpp, job/gate.hpp), and `stream`, a
// connected socket in clear or under TLS (job/tls.hpp) that all of them
// read and write through. Errors are merak::error naming this side (`self`)
// and the other end (`who`, e.g. "rank 3" or "rank 0 at 10.0.0.1:29500").
//
// A frame is a u64 little-endian length, then that many bytes.

#include <netinet/in.h>
#include <poll.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

struct ssl_st;  // OpenSSL's SSL

namespace merak::job {

using net_clock = std::chrono::steady_clock;

// Owner of a file descriptor.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) : fd_(fd) {}
  unique_fd(unique_fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() { reset(); }
  void reset();
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Milliseconds until `deadline`, clamped to [0, 2^30].
int ms_left(net_clock::time_point deadline);

// Waits for `events` on fd; false on timeout.
bool wait_fd(int fd, short events, net_clock::time_point deadline);

// A connected non-blocking socket, in clear or under a TLS session
// (job/tls.hpp makes those). The same calls move bytes either way. One
// thread at a time.
class stream {
 public:
  enum class io {
    done,         // `n` (> 0) bytes moved, or the handshake finished
    would_block,  // wait for read_wants() / write_wants() on fd(), then call again
    closed,       // the peer ended the stream (TLS: close_notify or end of file)
    failed,       // error() says why
  };
  stream() = default;
  explicit stream(unique_fd fd) : fd_(std::move(fd)) {}
  // Takes the session, which is bound to fd; handshake() runs it.
  stream(unique_fd fd, ssl_st* ssl) : fd_(std::move(fd)), ssl_(ssl) {}

  int fd() const { return fd_.get(); }
  bool secure() const { return ssl_ != nullptr; }
  void reset() { *this = stream(); }
  explicit operator bool() const { return bool(fd_); }

  // One step of the TLS handshake (done at once in clear); would_block
  // waits for read_wants().
  io handshake();
  io read_some(void* p, size_t cap, size_t& n) { return receive(p, cap, n, false); }
  // As read_some, keeping the bytes.
  io peek_some(void* p, size_t cap, size_t& n) { return receive(p, cap, n, true); }
  io write_some(const void* p, size_t len, size_t& n);
  short read_wants() const { return read_wants_; }
  short write_wants() const { return write_wants_; }
  // Ends this side's writing (TLS: close_notify; in clear: FIN); reading
  // goes on.
  void shutdown_write();
  const std::string& error() const { return error_; }

 private:
  io settle(int rc, short& wants);  // a TLS call's outcome
  io receive(void* p, size_t cap, size_t& n, bool peek);
  struct ssl_free {
    void operator()(ssl_st* s) const;
  };
  unique_fd fd_;
  std::unique_ptr<ssl_st, ssl_free> ssl_;  // freed before fd_ closes (declared after it)
  short read_wants_ = POLLIN, write_wants_ = POLLOUT;
  std::string error_;
};

void write_all(stream& s, const void* data, size_t n, net_clock::time_point deadline,
               const std::string& self, const std::string& who);
void read_all(stream& s, void* data, size_t n, net_clock::time_point deadline,
              const std::string& self, const std::string& who);

void put_u32(std::string& s, uint32_t v);
void put_u64(std::string& s, uint64_t v);
uint64_t get_le(const char* p, int bytes);
// A frame: the length, then `body`.
std::string frame(std::string_view body);

void send_frame(stream& s, std::string_view body, net_clock::time_point deadline,
                const std::string& self, const std::string& who);
// Refuses (throws) a frame longer than `max` before allocating it.
std::string recv_frame(stream& s, uint64_t max, net_clock::time_point deadline,
                       const std::string& self, const std::string& who);

// The IPv4 address of `host` (a name or dotted quad) with `port`; throws
// naming `what` ("MASTER_ADDR") when it does not resolve.
sockaddr_in resolve_ipv4(const std::string& host, int port, const char* what);
std::string ipv4_text(const sockaddr_in& a);

// A TCP socket listening on host:port (port 0: the kernel's pick),
// non-blocking and close-on-exec. Throws naming the address.
unique_fd listen_tcp(const std::string& host, int port, const std::string& self);
// The port a socket is bound to.
int bound_port(int fd);
// A TCP port that is free on `host` right now (the kernel's pick), for a
// launcher to hand to its workers as MASTER_PORT. Throws merak::error.
int pick_free_port(const std::string& host = "127.0.0.1");

// Connects to host:port, retrying while nothing listens there yet, until
// `deadline` (which also bounds each attempt). The socket is non-blocking
// (the helpers above wait with poll). Throws naming `who` and the last
// error.
unique_fd connect_tcp(const sockaddr_in& a, net_clock::time_point deadline, const std::string& self,
                      const std::string& who);

void set_nodelay(int fd);

// OpenSSL's queued errors as one line ("" when none), emptying the queue.
std::string ssl_errors();

// True when the peer's end of `s` is closed (end of stream, reset or a
// broken TLS session), without consuming data.
bool peer_closed(stream& s);

}  // namespace merak::job
