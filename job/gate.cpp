#include "job/gate.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "job/auth.hpp"
#include "job/socket_io.hpp"
#include "core/error.hpp"

namespace merak::job {
namespace {

// Moves bytes between `a` and `b` both ways until either end closes or
// fails, or `stop_fd` becomes readable. Either may be under TLS.
void relay(stream& a, stream& b, int stop_fd) {
  struct way {
    stream *from, *to;
    std::vector<char> buf = std::vector<char>(size_t{1} << 16);
    size_t head = 0, tail = 0;
    bool eof = false;
  };
  way w[2] = {{&a, &b}, {&b, &a}};
  auto pump = [](way& d) -> bool {  // false: the connection is over
    for (;;) {
      if (d.head < d.tail) {
        size_t k = 0;
        const auto r = d.to->write_some(d.buf.data() + d.head, d.tail - d.head, k);
        if (r == stream::io::would_block) return true;  // the receiver is full
        if (r != stream::io::done) return false;
        d.head += k;
        if (d.head < d.tail) continue;
        d.head = d.tail = 0;
      }
      if (d.eof) return true;
      size_t n = 0;
      const auto r = d.from->read_some(d.buf.data(), d.buf.size(), n);
      if (r == stream::io::done) {
        d.tail = n;
        continue;
      }
      if (r == stream::io::closed) {
        d.eof = true;
        d.to->shutdown_write();
        return true;
      }
      return r == stream::io::would_block;
    }
  };
  for (;;) {
    if (!pump(w[0]) || !pump(w[1])) return;
    if (w[0].eof && w[1].eof) return;
    pollfd fds[3] = {{a.fd(), 0, 0}, {b.fd(), 0, 0}, {stop_fd, POLLIN, 0}};
    for (int i = 0; i < 2; ++i) {
      way& d = w[i];
      if (d.head < d.tail)
        fds[1 - i].events |= d.to->write_wants();
      else if (!d.eof)
        fds[i].events |= d.from->read_wants();
    }
    if (::poll(fds, 3, -1) < 0 && errno != EINTR) return;
    if (fds[2].revents) return;
    // An error, or a hang-up on a socket nothing is waited for on (its way
    // already ended): poll would return at once forever.
    for (int i = 0; i < 2; ++i)
      if ((fds[i].revents & (POLLERR | POLLNVAL)) ||
          ((fds[i].revents & POLLHUP) && fds[i].events == 0))
        return;
  }
}

unique_fd make_eventfd() {
  unique_fd e(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!e) fail("gate: eventfd: {}", std::strerror(errno));
  return e;
}

void signal_fd(int fd) {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t k = ::write(fd, &one, sizeof one);
}

}  // namespace

struct gate_server::impl {
  std::string self;
  int target_port = 0;
  unique_fd listener;
  unique_fd stop = make_eventfd();         // ends everything
  unique_fd stop_accept = make_eventfd();  // ends admission only
  std::unique_ptr<auth_acceptor> acceptor;
  std::thread accept_thread;
  mutable std::mutex mu;
  struct relay_thread {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<relay_thread> relays;
  std::vector<std::string> refusals;  // the last 16
  std::string failure;                // why admission stopped, if it failed
  std::atomic<size_t> admitted{0}, service_failures{0};
  std::atomic<int> active{0};  // relays still moving bytes
  int port = 0;
  bool shut = false;

  void accept_loop() {
    try {
      admit();
    } catch (const std::exception& e) {
      std::lock_guard lock(mu);
      failure = e.what();
    }
  }

  void admit() {
    for (;;) {
      auto a = acceptor->next(
          net_clock::time_point::max(), [](const std::string&) { return ""; }, stop_accept.get());
      if (!a) return;
      // The service is on this host: it answers within a moment or not at
      // all (the other handshakes wait meanwhile).
      stream service;
      try {
        service = stream(connect_tcp(resolve_ipv4("127.0.0.1", target_port, "service"),
                                     net_clock::now() + std::chrono::milliseconds(200), self,
                                     fmt::format("the local service on port {}", target_port)));
      } catch (const error&) {
        ++service_failures;
        continue;
      }
      ++admitted;
      std::lock_guard lock(mu);
      // Finished relays are joined here, not only at the end.
      std::erase_if(relays, [](relay_thread& r) {
        if (!*r.done) return false;
        r.thread.join();
        return true;
      });
      // The thread owns both ends: when one closes, the other is closed too.
      auto done = std::make_shared<std::atomic<bool>>(false);
      relays.reserve(relays.size() + 1);
      ++active;
      try {
        std::thread t([this, done, x = std::move(a->s), y = std::move(service)]() mutable {
          relay(x, y, stop.get());
          --active;
          *done = true;
        });
        relays.push_back({std::move(t), std::move(done)});
      } catch (...) {
        --active;
        throw;
      }
    }
  }
};

gate_server::gate_server(const std::string& bind_host, int port, int target_port,
                         job_credentials creds, std::string purpose, std::string self)
    : p_(std::make_unique<impl>()) {
  p_->self = std::move(self);
  p_->target_port = target_port;
  p_->listener = listen_tcp(bind_host, port, p_->self);
  p_->port = bound_port(p_->listener.get());
  p_->acceptor =
      std::make_unique<auth_acceptor>(p_->listener.get(), std::move(creds), std::move(purpose));
  p_->acceptor->on_refused = [p = p_.get()](const std::string& peer, const std::string& why) {
    std::lock_guard lock(p->mu);
    if (p->refusals.size() == 16) p->refusals.erase(p->refusals.begin());
    p->refusals.push_back(fmt::format("{}: {}", peer, why));
  };
  p_->accept_thread = std::thread([this] { p_->accept_loop(); });
}

gate_server::~gate_server() {
  shutdown(net_clock::now() + std::chrono::seconds(2));
}

void gate_server::shutdown(net_clock::time_point linger_until) {
  if (p_->shut) return;
  p_->shut = true;
  close_listener();
  // Relayed connections get until `linger_until` to end by themselves (both
  // ends closing after their last messages), then are closed.
  while (p_->active > 0 && net_clock::now() < linger_until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  signal_fd(p_->stop.get());
  for (auto& r : p_->relays) r.thread.join();
  p_->relays.clear();
}

int gate_server::port() const {
  return p_->port;
}

void gate_server::close_listener() {
  signal_fd(p_->stop_accept.get());
  if (p_->accept_thread.joinable()) p_->accept_thread.join();
  p_->listener.reset();
}

size_t gate_server::admitted() const {
  return p_->admitted;
}
size_t gate_server::dropped() const {
  return p_->acceptor->dropped() + p_->service_failures;
}
std::vector<std::string> gate_server::refusals() const {
  std::lock_guard lock(p_->mu);
  return p_->refusals;
}

struct gate_tunnel::impl {
  stream remote;
  unique_fd listener, stop = make_eventfd();
  std::atomic<bool> done{false};
  int local_port = 0;
  std::thread worker;
};

gate_tunnel::gate_tunnel(const std::string& host, int port, const job_credentials& creds,
                         std::string purpose, std::chrono::milliseconds timeout, std::string self,
                         std::string who)
    : p_(std::make_unique<impl>()) {
  p_->remote = connect_authenticated(resolve_ipv4(host, port, "gate address"), creds, purpose, {},
                                     net_clock::now() + timeout, self, who);
  p_->listener = listen_tcp("127.0.0.1", 0, self);
  p_->local_port = bound_port(p_->listener.get());
  // The local client connects right after this constructor returns.
  const auto accept_by = net_clock::now() + timeout;
  p_->worker = std::thread([p = p_.get(), accept_by] {
    // One local connection (the CAF client's), then the listener closes.
    pollfd fds[2] = {{p->listener.get(), POLLIN, 0}, {p->stop.get(), POLLIN, 0}};
    int rc;
    while ((rc = ::poll(fds, 2, ms_left(accept_by))) < 0 && errno == EINTR) {
    }
    stream local;
    if (rc > 0 && !fds[1].revents)
      local = stream(
          unique_fd(::accept4(p->listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)));
    p->listener.reset();
    if (local) {
      set_nodelay(local.fd());
      relay(local, p->remote, p->stop.get());
    }
    p->remote.reset();
    p->done = true;
  });
}

gate_tunnel::~gate_tunnel() {
  shutdown(net_clock::now() + std::chrono::seconds(2));
}

void gate_tunnel::shutdown(net_clock::time_point linger_until) {
  if (!p_->worker.joinable()) return;
  while (!p_->done && net_clock::now() < linger_until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  signal_fd(p_->stop.get());
  p_->worker.join();
}

int gate_tunnel::local_port() const {
  return p_->local_port;
}

}  // namespace merak::job
