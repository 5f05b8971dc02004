#include "comm/socket_io.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "core/error.hpp"

namespace merak::comm {

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

void write_all(int fd, const void* data, size_t n, net_clock::time_point deadline,
               const std::string& self, const std::string& who) {
  auto* p = static_cast<const char*>(data);
  while (n) {
    if (!wait_fd(fd, POLLOUT, deadline)) fail("{}: timed out sending to {}", self, who);
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      fail("{}: sending to {}: {} (did it exit?)", self, who, std::strerror(errno));
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
}

void read_all(int fd, void* data, size_t n, net_clock::time_point deadline, const std::string& self,
              const std::string& who) {
  auto* p = static_cast<char*>(data);
  while (n) {
    if (!wait_fd(fd, POLLIN, deadline)) fail("{}: timed out waiting for {}", self, who);
    ssize_t k = ::recv(fd, p, n, 0);
    if (k == 0) fail("{}: {} closed the connection (did it exit?)", self, who);
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      fail("{}: receiving from {}: {}", self, who, std::strerror(errno));
    }
    p += k;
    n -= static_cast<size_t>(k);
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

void send_frame(int fd, const std::string& body, net_clock::time_point deadline,
                const std::string& self, const std::string& who) {
  std::string f;
  f.reserve(8 + body.size());
  put_u64(f, body.size());
  f += body;
  write_all(fd, f.data(), f.size(), deadline, self, who);
}

std::string recv_frame(int fd, uint64_t max, net_clock::time_point deadline,
                       const std::string& self, const std::string& who) {
  char len[8];
  read_all(fd, len, 8, deadline, self, who);
  const uint64_t n = get_le(len, 8);
  if (n > max) fail("{}: {} sent a frame of {} bytes (at most {} allowed)", self, who, n, max);
  std::string body(n, '\0');
  read_all(fd, body.data(), n, deadline, self, who);
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

std::string interface_of(const std::string& addr) {
  in_addr want{};
  if (::inet_pton(AF_INET, addr.c_str(), &want) != 1) return {};
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return {};
  std::string name;
  for (ifaddrs* i = all; i && name.empty(); i = i->ifa_next)
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
        reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == want.s_addr)
      name = i->ifa_name;
  ::freeifaddrs(all);
  return name;
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

bool peer_closed(int fd) {
  char c;
  const ssize_t k = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

}  // namespace merak::comm
