#include "comm/bootstrap.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include "core/checksum.hpp"
#include "core/error.hpp"

namespace merak::comm {
namespace {

using clock_type = std::chrono::steady_clock;
constexpr char kmagic[8] = {'M', 'E', 'R', 'A', 'K', 'B', 'S', '1'};
constexpr uint64_t kmax_hello = 4096;               // before the peer is admitted
constexpr uint64_t kmax_frame = uint64_t{1} << 30;  // after
constexpr uint64_t knotice = uint64_t{1} << 63;     // length field of a notice

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
  ~unique_fd() { reset(); }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

int ms_left(clock_type::time_point deadline) {
  auto d = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(d.count(), 1 << 30)));
}

// Waits for `events` on fd; false on timeout.
bool wait_fd(int fd, short events, clock_type::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, ms_left(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) fail("bootstrap: poll: {}", std::strerror(errno));
  }
}

// `who` names the other end in errors ("rank 3", "rank 0 at 127.0.0.1:29500").
void write_all(int fd, const void* data, size_t n, clock_type::time_point deadline,
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

void read_all(int fd, void* data, size_t n, clock_type::time_point deadline,
              const std::string& self, const std::string& who) {
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

void send_frame(int fd, const std::string& body, clock_type::time_point deadline,
                const std::string& self, const std::string& who) {
  std::string f;
  f.reserve(8 + body.size());
  put_u64(f, body.size());
  f += body;
  write_all(fd, f.data(), f.size(), deadline, self, who);
}

std::string recv_frame(int fd, uint64_t max, clock_type::time_point deadline,
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
  if (rc != 0 || !res) fail("bootstrap: cannot resolve {} '{}': {}", what, host, gai_strerror(rc));
  sockaddr_in a{};
  std::memcpy(&a, res->ai_addr, sizeof a);
  ::freeaddrinfo(res);
  a.sin_port = htons(static_cast<uint16_t>(port));
  return a;
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

class tcp_bootstrap final : public bootstrap {
 public:
  tcp_bootstrap(const bootstrap_options& o) : o_(o) {
    self_ = fmt::format("bootstrap rank {}", o.rank);
    where_ = fmt::format("{}:{}", o.addr, o.port);
    if (o.world_size == 1) return;
    if (o.rank == 0)
      admit();
    else
      join();
  }

  int rank() const override { return o_.rank; }
  int size() const override { return o_.world_size; }

  std::string local_address() const override {
    int fd = -1;
    if (o_.rank == 0) {
      for (auto& p : peers_)
        if (p) fd = p.get();
    } else {
      fd = root_.get();
    }
    sockaddr_in a{};
    socklen_t len = sizeof a;
    if (fd < 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "127.0.0.1";
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &a.sin_addr, text, sizeof text);
    return text;
  }

  int dead_peer() override {
    if (dead_ >= 0 || o_.world_size == 1) return dead_;
    std::unique_lock lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return dead_;
    if (o_.rank == 0) {
      for (int k = 1; k < o_.world_size; ++k)
        if (peers_[k] && closed(peers_[k].get())) {
          dead_ = k;
          // Best effort: tell the others, who cannot see rank k's sockets.
          for (int j = 1; j < o_.world_size; ++j) {
            if (j == k || !peers_[j]) continue;
            std::string f;
            put_u64(f, knotice | uint64_t(k));
            ::send(peers_[j].get(), f.data(), f.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
          }
          break;
        }
    } else if (root_) {
      // A notice precedes rank 0's own end of stream: read it first.
      char b[8];
      if (::recv(root_.get(), b, 8, MSG_PEEK | MSG_DONTWAIT) == 8 && (get_le(b, 8) & knotice)) {
        ::recv(root_.get(), b, 8, MSG_DONTWAIT);
        dead_ = static_cast<int>(get_le(b, 8) & ~knotice);
      } else if (closed(root_.get())) {
        dead_ = 0;
      }
    }
    return dead_;
  }

  std::vector<std::string> allgather(const std::string& mine) override {
    std::lock_guard lock(mu_);
    const int P = o_.world_size;
    if (P == 1) return {mine};
    const auto deadline = clock_type::now() + o_.timeout;
    std::vector<std::string> all(P);
    if (o_.rank == 0) {
      all[0] = mine;
      for (int k = 1; k < P; ++k)
        all[k] = recv_frame(peers_[k].get(), kmax_frame, deadline, self_, who(k));
      std::string out;
      for (auto& b : all) {
        put_u64(out, b.size());
        out += b;
      }
      for (int k = 1; k < P; ++k) send_frame(peers_[k].get(), out, deadline, self_, who(k));
      return all;
    }
    send_frame(root_.get(), mine, deadline, self_, root_name());
    std::string in = recv_checked(root_.get(), deadline, root_name());
    size_t pos = 0;
    for (int k = 0; k < P; ++k) {
      if (in.size() - pos < 8) fail("{}: malformed all-gather reply from rank 0", self_);
      const uint64_t n = get_le(in.data() + pos, 8);
      pos += 8;
      if (in.size() - pos < n) fail("{}: malformed all-gather reply from rank 0", self_);
      all[k] = in.substr(pos, n);
      pos += n;
    }
    return all;
  }

 private:
  static std::string who(int k) { return fmt::format("rank {}", k); }
  std::string root_name() const { return fmt::format("rank 0 at {}", where_); }

  // Rank 0: listen, admit world_size-1 peers with the right token.
  void admit() {
    const auto deadline = clock_type::now() + o_.timeout;
    unique_fd lst(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!lst) fail("{}: socket: {}", self_, std::strerror(errno));
    int one = 1;
    ::setsockopt(lst.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a = resolve_ipv4(o_.bind_addr, o_.port, "bind address");
    if (::bind(lst.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
      fail("{}: cannot listen on {}:{}: {} (MASTER_PORT in use?)", self_, o_.bind_addr, o_.port,
           std::strerror(errno));
    if (::listen(lst.get(), 128) != 0) fail("{}: listen: {}", self_, std::strerror(errno));
    ::fcntl(lst.get(), F_SETFL, O_NONBLOCK);
    peers_.resize(o_.world_size);
    int joined = 1;
    while (joined < o_.world_size) {
      if (!wait_fd(lst.get(), POLLIN, deadline)) {
        std::string missing;
        for (int k = 1; k < o_.world_size; ++k)
          if (!peers_[k]) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", k);
        fail("{}: ranks {} did not join within {} ms at {}:{}", self_, missing, o_.timeout.count(),
             o_.bind_addr, o_.port);
      }
      unique_fd c(::accept4(lst.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!c) continue;
      set_nodelay(c.get());
      // A peer gets a few seconds to say hello; a silent one is dropped.
      const auto hello_deadline =
          std::min(deadline, clock_type::now() + std::chrono::milliseconds(5000));
      int k = -1;
      std::string reason;
      try {
        k = check_hello(recv_frame(c.get(), kmax_hello, hello_deadline, self_, "a joining peer"),
                        reason);
      } catch (const error&) {
        continue;  // closed or silent before hello: not one of ours
      }
      std::string verdict(1, reason.empty() ? '\1' : '\0');
      verdict += reason;
      try {
        send_frame(c.get(), verdict, hello_deadline, self_, "a joining peer");
      } catch (const error&) {
        continue;
      }
      if (reason.empty()) {
        peers_[k] = std::move(c);
        ++joined;
      }
    }
  }

  // Returns the peer's rank, or -1 with `reason` set when it is refused.
  int check_hello(const std::string& h, std::string& reason) {
    if (h.size() < 20 || std::memcmp(h.data(), kmagic, 8) != 0) {
      reason = "not a merak bootstrap hello";
      return -1;
    }
    const int rank = static_cast<int>(get_le(h.data() + 8, 4));
    const int size = static_cast<int>(get_le(h.data() + 12, 4));
    const uint64_t tlen = get_le(h.data() + 16, 4);
    if (h.size() != 20 + tlen) {
      reason = "malformed hello";
      return -1;
    }
    if (!same_secret(h.data() + 20, tlen, o_.token.data(), o_.token.size())) {
      reason = "wrong job token";
      return -1;
    }
    if (size != o_.world_size) {
      reason = fmt::format("world size {} differs from rank 0's {}", size, o_.world_size);
      return -1;
    }
    if (rank < 1 || rank >= o_.world_size) {
      reason = fmt::format("rank {} out of range 1..{}", rank, o_.world_size - 1);
      return -1;
    }
    if (peers_[rank]) {
      reason = fmt::format("rank {} already joined", rank);
      return -1;
    }
    return rank;
  }

  // Ranks > 0: connect to rank 0 (retrying while it is not yet listening),
  // present the token, read the verdict.
  void join() {
    const auto deadline = clock_type::now() + o_.timeout;
    sockaddr_in a = resolve_ipv4(o_.addr, o_.port, "MASTER_ADDR");
    std::string last = "no attempt";
    for (;;) {
      unique_fd c(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (!c) fail("{}: socket: {}", self_, std::strerror(errno));
      if (::connect(c.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
        root_ = std::move(c);
        break;
      }
      last = std::strerror(errno);
      if (clock_type::now() >= deadline)
        fail(
            "{}: rank 0 at {} not reachable within {} ms (last error: {}); check MASTER_ADDR and "
            "MASTER_PORT, and that rank 0 runs",
            self_, where_, o_.timeout.count(), last);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    set_nodelay(root_.get());
    std::string hello(kmagic, 8);
    put_u32(hello, static_cast<uint32_t>(o_.rank));
    put_u32(hello, static_cast<uint32_t>(o_.world_size));
    put_u32(hello, static_cast<uint32_t>(o_.token.size()));
    hello += o_.token;
    send_frame(root_.get(), hello, deadline, self_, root_name());
    std::string v = recv_frame(root_.get(), kmax_hello, deadline, self_, root_name());
    if (v.empty() || v[0] != '\1')
      fail("{}: {} refused this process: {}", self_, root_name(),
           v.size() > 1 ? v.substr(1) : std::string("no reason given"));
  }

  // True when the peer's end of `fd` is closed (EOF or reset), without
  // consuming data.
  static bool closed(int fd) {
    char c;
    const ssize_t k = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }

  // Reads a frame, turning rank 0's notice into an error naming the rank.
  std::string recv_checked(int fd, clock_type::time_point deadline, const std::string& who) {
    char len[8];
    read_all(fd, len, 8, deadline, self_, who);
    const uint64_t n = get_le(len, 8);
    if (n & knotice) {
      dead_ = static_cast<int>(n & ~knotice);
      fail("{}: rank {} went away (reported by rank 0)", self_, dead_);
    }
    if (n > kmax_frame)
      fail("{}: {} sent a frame of {} bytes (at most {} allowed)", self_, who, n, kmax_frame);
    std::string body(n, '\0');
    read_all(fd, body.data(), n, deadline, self_, who);
    return body;
  }

  bootstrap_options o_;
  std::string self_, where_;
  std::mutex mu_;  // allgather vs dead_peer
  std::atomic<int> dead_{-1};
  std::vector<unique_fd> peers_;  // rank 0: connection to each rank
  unique_fd root_;                // ranks > 0: connection to rank 0
};

// Parses a non-negative integer, or throws naming the variable.
int parse_int(const char* s, const char* var, int lo, int hi) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s, &end, 10);
  if (!*s || *end || errno || v < lo || v > hi)
    fail("bootstrap: {}='{}' is not an integer in {}..{}", var, s, lo, hi);
  return static_cast<int>(v);
}

}  // namespace

bootstrap_options resolve_bootstrap(bootstrap_options o, const env_lookup& env) {
  auto first = [&](std::initializer_list<const char*> vars, const char*& which) -> const char* {
    for (const char* v : vars)
      if (const char* s = env(v); s && *s) {
        which = v;
        return s;
      }
    return nullptr;
  };
  const char* rank_src = "the explicit rank";
  if (o.rank < 0) {
    const char* s = first({"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}, rank_src);
    if (!s) fail("bootstrap: no rank given (flag, RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID)");
    o.rank = parse_int(s, rank_src, 0, 1 << 20);
  }
  const char* size_src = "the explicit world size";
  if (o.world_size < 0) {
    const char* s = first({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"}, size_src);
    if (!s)
      fail(
          "bootstrap: no world size given (flag, WORLD_SIZE, OMPI_COMM_WORLD_SIZE or "
          "SLURM_NTASKS)");
    o.world_size = parse_int(s, size_src, 1, 1 << 20);
  }
  if (o.world_size < 1)
    fail("bootstrap: world size {} ({}) must be at least 1", o.world_size, size_src);
  if (o.rank >= o.world_size)
    fail("bootstrap: rank {} (from {}) is not below the world size {} (from {})", o.rank, rank_src,
         o.world_size, size_src);
  if (o.addr.empty()) {
    const char* s = env("MASTER_ADDR");
    o.addr = s && *s ? s : "127.0.0.1";
  }
  if (o.port < 0) {
    if (const char* s = env("MASTER_PORT"); s && *s)
      o.port = parse_int(s, "MASTER_PORT", 1, 65535);
    else if (o.world_size > 1)
      fail("bootstrap: no rendezvous port (flag or MASTER_PORT) for a world of {}", o.world_size);
  } else if (o.port == 0 || o.port > 65535) {
    fail("bootstrap: port {} is not in 1..65535", o.port);
  }
  if (o.token.empty())
    if (const char* s = env("MERAK_JOB_TOKEN")) o.token = s;
  if (o.bind_addr.empty()) {
    if (const char* s = env("MERAK_BIND_ADDR"); s && *s)
      o.bind_addr = s;
    else
      o.bind_addr = (o.addr == "127.0.0.1" || o.addr == "localhost") ? "127.0.0.1" : "0.0.0.0";
  }
  if (o.timeout.count() <= 0) fail("bootstrap: timeout {} ms must be positive", o.timeout.count());
  // Without a token any process that reaches the port may join: only
  // where nothing but this host can reach it.
  const bool loopback = o.addr == "127.0.0.1" || o.addr == "localhost";
  if (o.world_size > 1 && o.token.empty() && (!loopback || o.bind_addr != "127.0.0.1"))
    fail(
        "bootstrap: a job reachable from other hosts (rendezvous {}, listening on {}) needs a job "
        "token: set MERAK_JOB_TOKEN on every process (merak launch and merak node set one)",
        o.addr, o.bind_addr);
  return o;
}

bootstrap_options resolve_bootstrap(bootstrap_options given) {
  return resolve_bootstrap(std::move(given), [](const char* v) { return std::getenv(v); });
}

std::unique_ptr<bootstrap> connect_bootstrap(const bootstrap_options& o) {
  if (o.rank < 0 || o.world_size < 1 || o.rank >= o.world_size)
    fail("bootstrap: options not resolved (rank {}, world size {})", o.rank, o.world_size);
  return std::make_unique<tcp_bootstrap>(o);
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

}  // namespace merak::comm
