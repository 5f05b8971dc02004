#include "job/socket_io.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "core/error.hpp"

namespace merak::job {

void unique_fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int ms_left(net_clock::time_point deadline) {
  auto d = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - net_clock::now());
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(d.count(), 1 << 30)));
}

bool wait_fd(int fd, short events, net_clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, ms_left(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) fail("poll: {}", std::strerror(errno));
  }
}

void stream::ssl_free::operator()(ssl_st* s) const {
  SSL_free(s);
}

namespace {

bool transient(int e) {
  return e == EAGAIN || e == EWOULDBLOCK || e == EINTR;
}

}  // namespace

// OpenSSL's queued errors as one line ("" when none), emptying the queue.
std::string ssl_errors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(e, text, sizeof text);
    const char* reason = ERR_reason_error_string(e);
    out += (out.empty() ? "" : "; ") + std::string(reason ? reason : text);
  }
  return out;
}

stream::io stream::settle(int rc, short& wants) {
  const int e = SSL_get_error(ssl_.get(), rc);
  switch (e) {
    case SSL_ERROR_WANT_READ:
      wants = POLLIN;
      return io::would_block;
    case SSL_ERROR_WANT_WRITE:
      wants = POLLOUT;
      return io::would_block;
    case SSL_ERROR_ZERO_RETURN:
      return io::closed;
    case SSL_ERROR_SYSCALL: {
      const int err = errno;
      const std::string queued = ssl_errors();
      if (!queued.empty()) {
        error_ = queued;
        return io::failed;
      }
      if (rc == 0 || err == 0 || err == ECONNRESET || err == EPIPE) return io::closed;
      if (transient(err)) {
        wants = POLLIN;
        return io::would_block;
      }
      error_ = std::strerror(err);
      return io::failed;
    }
    default: {
      error_ = ssl_errors();
      const long v = SSL_get_verify_result(ssl_.get());
      if (v != X509_V_OK)
        error_ = fmt::format("{} ({})", error_.empty() ? "certificate refused" : error_,
                             X509_verify_cert_error_string(v));
      if (error_.empty()) error_ = "TLS error";
      return io::failed;
    }
  }
}

stream::io stream::handshake() {
  if (!ssl_) return io::done;
  ERR_clear_error();
  const int rc = SSL_do_handshake(ssl_.get());
  return rc == 1 ? io::done : settle(rc, read_wants_);
}

stream::io stream::receive(void* p, size_t cap, size_t& n, bool peek) {
  n = 0;
  if (ssl_) {
    ERR_clear_error();
    const int rc = peek ? SSL_peek_ex(ssl_.get(), p, cap, &n) : SSL_read_ex(ssl_.get(), p, cap, &n);
    return rc == 1 ? io::done : settle(rc, read_wants_);
  }
  const ssize_t k = ::recv(fd(), p, cap, MSG_DONTWAIT | (peek ? MSG_PEEK : 0));
  if (k > 0) {
    n = static_cast<size_t>(k);
    return io::done;
  }
  if (k == 0 || errno == ECONNRESET) return io::closed;
  if (transient(errno)) return read_wants_ = POLLIN, io::would_block;
  error_ = std::strerror(errno);
  return io::failed;
}

stream::io stream::write_some(const void* p, size_t len, size_t& n) {
  n = 0;
  if (ssl_) {
    ERR_clear_error();
    const int rc = SSL_write_ex(ssl_.get(), p, len, &n);
    return rc == 1 ? io::done : settle(rc, write_wants_);
  }
  const ssize_t k = ::send(fd(), p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (k >= 0) {
    n = static_cast<size_t>(k);
    return n ? io::done : (write_wants_ = POLLOUT, io::would_block);
  }
  if (errno == EPIPE || errno == ECONNRESET) return io::closed;
  if (transient(errno)) return write_wants_ = POLLOUT, io::would_block;
  error_ = std::strerror(errno);
  return io::failed;
}

void stream::shutdown_write() {
  if (ssl_) {
    ERR_clear_error();
    SSL_shutdown(ssl_.get());  // sends close_notify; the peer's comes later, or not
    ERR_clear_error();
  } else if (fd_) {
    ::shutdown(fd(), SHUT_WR);
  }
}

void write_all(stream& s, const void* data, size_t n, net_clock::time_point deadline,
               const std::string& self, const std::string& who) {
  auto* p = static_cast<const char*>(data);
  while (n) {
    size_t k = 0;
    switch (s.write_some(p, n, k)) {
      case stream::io::done:
        p += k;
        n -= k;
        break;
      case stream::io::would_block:
        if (!wait_fd(s.fd(), s.write_wants(), deadline))
          fail("{}: timed out sending to {}", self, who);
        break;
      case stream::io::closed:
        fail("{}: sending to {}: connection closed (did it exit?)", self, who);
      case stream::io::failed:
        fail("{}: sending to {}: {} (did it exit?)", self, who, s.error());
    }
  }
}

void read_all(stream& s, void* data, size_t n, net_clock::time_point deadline,
              const std::string& self, const std::string& who) {
  auto* p = static_cast<char*>(data);
  while (n) {
    size_t k = 0;
    switch (s.read_some(p, n, k)) {
      case stream::io::done:
        p += k;
        n -= k;
        break;
      case stream::io::would_block:
        if (!wait_fd(s.fd(), s.read_wants(), deadline))
          fail("{}: timed out waiting for {}", self, who);
        break;
      case stream::io::closed:
        fail("{}: {} closed the connection (did it exit?)", self, who);
      case stream::io::failed:
        fail("{}: receiving from {}: {}", self, who, s.error());
    }
  }
}

void put_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
}
void put_u64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
}
uint64_t get_le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

std::string frame(std::string_view body) {
  std::string f;
  f.reserve(8 + body.size());
  put_u64(f, body.size());
  f += body;
  return f;
}

void send_frame(stream& s, std::string_view body, net_clock::time_point deadline,
                const std::string& self, const std::string& who) {
  const std::string f = frame(body);
  write_all(s, f.data(), f.size(), deadline, self, who);
}

std::string recv_frame(stream& s, uint64_t max, net_clock::time_point deadline,
                       const std::string& self, const std::string& who) {
  char len[8];
  read_all(s, len, 8, deadline, self, who);
  const uint64_t n = get_le(len, 8);
  if (n > max) fail("{}: {} sent a frame of {} bytes (at most {} allowed)", self, who, n, max);
  std::string body(n, '\0');
  read_all(s, body.data(), n, deadline, self, who);
  return body;
}

sockaddr_in resolve_ipv4(const std::string& host, int port, const char* what) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || !res) fail("cannot resolve {} '{}': {}", what, host, gai_strerror(rc));
  sockaddr_in a{};
  std::memcpy(&a, res->ai_addr, sizeof a);
  ::freeaddrinfo(res);
  a.sin_port = htons(static_cast<uint16_t>(port));
  return a;
}

std::string ipv4_text(const sockaddr_in& a) {
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &a.sin_addr, text, sizeof text);
  return text;
}

unique_fd listen_tcp(const std::string& host, int port, const std::string& self) {
  unique_fd lst(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!lst) fail("{}: socket: {}", self, std::strerror(errno));
  int one = 1;
  ::setsockopt(lst.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a = resolve_ipv4(host, port, "listen address");
  if (::bind(lst.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    const int e = errno;
    fail("{}: cannot listen on {}:{}: {}{}", self, host, port, std::strerror(e),
         e == EADDRNOTAVAIL ? " (not an address of this host)"
         : e == EADDRINUSE  ? " (port in use)"
                            : "");
  }
  if (::listen(lst.get(), 128) != 0) fail("{}: listen: {}", self, std::strerror(errno));
  ::fcntl(lst.get(), F_SETFL, O_NONBLOCK);
  return lst;
}

int bound_port(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return -1;
  return ntohs(a.sin_port);
}

unique_fd connect_tcp(const sockaddr_in& a, net_clock::time_point deadline, const std::string& self,
                      const std::string& who) {
  std::string last = "no attempt";
  const auto start = net_clock::now();
  for (;;) {
    unique_fd c(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!c) fail("{}: socket: {}", self, std::strerror(errno));
    int err = ::connect(c.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      // A peer whose packets are dropped holds connect() for minutes: the
      // deadline bounds the wait.
      if (!wait_fd(c.get(), POLLOUT, deadline)) {
        err = ETIMEDOUT;
      } else {
        socklen_t len = sizeof err;
        if (::getsockopt(c.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      }
    }
    if (err == 0) {
      set_nodelay(c.get());
      return c;
    }
    last = std::strerror(err);
    if (net_clock::now() >= deadline)
      fail("{}: {} not reachable within {} ms (last error: {})", self, who,
           std::chrono::ceil<std::chrono::milliseconds>(deadline - start).count(), last);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

bool peer_closed(stream& s) {
  char c;
  size_t n = 0;
  const auto r = s.peek_some(&c, 1, n);
  return r == stream::io::closed || r == stream::io::failed;
}

int pick_free_port(const std::string& host) {
  unique_fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s) fail("pick_free_port: socket: {}", std::strerror(errno));
  sockaddr_in a = resolve_ipv4(host, 0, "host");
  socklen_t len = sizeof a;
  if (::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
    fail("pick_free_port: {}: {}", host, std::strerror(errno));
  return ntohs(a.sin_port);
}

}  // namespace merak::job
