#pragma once
// Blocking TCP helpers with deadlines, shared by the bootstrap, the
// authenticated handshake and the gate (comm/auth.hpp, comm/gate.hpp).
// Errors are merak::error naming this side (`self`) and the other end
// (`who`, e.g. "rank 3" or "rank 0 at 10.0.0.1:29500").
//
// A frame is a u64 little-endian length, then that many bytes.

#include <netinet/in.h>
#include <poll.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace merak::comm {

using net_clock = std::chrono::steady_clock;

// Owner of a file descriptor.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) : fd_(fd) {}
  unique_fd(unique_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
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

void write_all(int fd, const void* data, size_t n, net_clock::time_point deadline,
               const std::string& self, const std::string& who);
void read_all(int fd, void* data, size_t n, net_clock::time_point deadline, const std::string& self,
              const std::string& who);

void put_u32(std::string& s, uint32_t v);
void put_u64(std::string& s, uint64_t v);
uint64_t get_le(const char* p, int bytes);

void send_frame(int fd, const std::string& body, net_clock::time_point deadline,
                const std::string& self, const std::string& who);
// Refuses (throws) a frame longer than `max` before allocating it.
std::string recv_frame(int fd, uint64_t max, net_clock::time_point deadline,
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

// Connects to host:port, retrying while nothing listens there yet, until
// `deadline` (which also bounds each attempt). The socket is non-blocking
// (the helpers above wait with poll). Throws naming `who` and the last
// error.
unique_fd connect_tcp(const sockaddr_in& a, net_clock::time_point deadline, const std::string& self,
                      const std::string& who);

void set_nodelay(int fd);

// The name of the network interface that holds the IPv4 address `addr`
// ("eth0"; "lo" for 127.0.0.1), or "" when no interface of this host does.
std::string interface_of(const std::string& addr);

// True when the peer's end of `fd` is closed (EOF or reset), without
// consuming data.
bool peer_closed(int fd);

}  // namespace merak::comm
