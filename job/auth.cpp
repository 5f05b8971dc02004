#include "job/auth.hpp"
#include "job/identity.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "core/checksum.hpp"
#include "core/error.hpp"

namespace merak::job {
namespace {

constexpr char kmagic[8] = {'M', 'E', 'R', 'A', 'K', 'A', 'U', '1'};

std::string mac_input(const char* side, const std::string& purpose, std::string_view first,
                      std::string_view second, std::string_view payload) {
  std::string m = side;
  m.push_back('\0');
  m += purpose;
  m.push_back('\0');
  m += first;
  m += second;
  m += payload;
  return m;
}

}  // namespace

std::string hmac_sha256(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
            reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &n) ||
      n != kauth_mac)
    fail("HMAC-SHA256 failed (OpenSSL)");
  return std::string(reinterpret_cast<char*>(out), n);
}

std::string random_bytes(size_t n) {
  std::string s(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t k = ::getrandom(s.data() + got, n - got, 0);
    if (k < 0) {
      if (errno == EINTR) continue;
      fail("getrandom: {}", std::strerror(errno));
    }
    got += static_cast<size_t>(k);
  }
  return s;
}

std::string read_token_file(const std::string& path) {
  unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd) fail("{}: cannot open the token file: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail("{}: {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("{}: the token file is not a regular file", path);
  if (st.st_mode & 077)
    fail("{}: the token file may be read or written by other users (mode {:04o}); chmod 600 it",
         path, st.st_mode & 07777);
  if (st.st_size > 4096) fail("{}: the token file has {} bytes (at most 4096)", path, st.st_size);
  std::string t(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < t.size()) {
    const ssize_t k = ::read(fd.get(), t.data() + got, t.size() - got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0)
      fail("{}: reading the token file: {}", path, k < 0 ? std::strerror(errno) : "short");
    got += static_cast<size_t>(k);
  }
  if (!t.empty() && t.back() == '\n') t.pop_back();
  if (!t.empty() && t.back() == '\r') t.pop_back();
  if (t.empty()) fail("{}: the token file is empty", path);
  if (t.find('\n') != std::string::npos) fail("{}: the token file has more than one line", path);
  return t;
}

auth_server::auth_server(std::string token, std::string purpose)
    : token_(std::move(token)), purpose_(std::move(purpose)), nonce_s_(random_bytes(kauth_nonce)) {
  MERAK_CHECK(purpose_.size() < 256, "purpose '{}'", purpose_);
  challenge_.assign(kmagic, 8);
  challenge_.push_back(static_cast<char>(purpose_.size()));
  challenge_ += purpose_;
  challenge_ += nonce_s_;
}

bool auth_server::check(std::string_view h, std::string& reason) {
  constexpr size_t head = 8 + kauth_nonce + 4;
  if (h.size() < head + kauth_mac || std::memcmp(h.data(), kmagic, 8) != 0) {
    reason = "not a merak hello";
    return false;
  }
  const uint64_t m = get_le(h.data() + 8 + kauth_nonce, 4);
  if (h.size() != head + m + kauth_mac) {
    reason = "malformed hello";
    return false;
  }
  nonce_c_.assign(h.data() + 8, kauth_nonce);
  payload_.assign(h.data() + head, m);
  const std::string want =
      hmac_sha256(token_, mac_input("client", purpose_, nonce_s_, nonce_c_, payload_));
  if (!same_secret(h.data() + head + m, kauth_mac, want.data(), want.size())) {
    reason = "wrong job token";
    payload_.clear();
    return false;
  }
  return true;
}

std::string auth_server::accept() const {
  std::string v(1, '\1');
  v += hmac_sha256(token_, mac_input("server", purpose_, nonce_c_, nonce_s_, payload_));
  return v;
}

std::string auth_server::refuse(std::string_view reason) {
  std::string v(1, '\0');
  v += reason.substr(0, kmax_auth_frame - 1);
  return v;
}

auth_client::auth_client(std::string token, std::string purpose, std::string payload)
    : token_(std::move(token)), purpose_(std::move(purpose)), payload_(std::move(payload)) {
  MERAK_CHECK(payload_.size() + 8 + kauth_nonce + 4 + kauth_mac <= kmax_auth_frame,
              "auth payload of {} bytes", payload_.size());
}

std::string auth_client::answer(std::string_view c) {
  if (c.size() < 9 || std::memcmp(c.data(), kmagic, 8) != 0)
    fail("the other end is not a merak service (no merak challenge)");
  const size_t n = static_cast<unsigned char>(c[8]);
  if (c.size() != 9 + n + kauth_nonce) fail("the other end sent a malformed challenge");
  const std::string_view purpose = c.substr(9, n);
  if (purpose != purpose_)
    fail("the other end is merak's '{}' service, not '{}'", std::string(purpose), purpose_);
  nonce_s_.assign(c.substr(9 + n));
  nonce_c_ = random_bytes(kauth_nonce);
  std::string h(kmagic, 8);
  h += nonce_c_;
  put_u32(h, static_cast<uint32_t>(payload_.size()));
  h += payload_;
  h += hmac_sha256(token_, mac_input("client", purpose_, nonce_s_, nonce_c_, payload_));
  return h;
}

std::string auth_client::verdict(std::string_view v) const {
  if (v.empty()) return "empty verdict";
  // The reason is the other end's text, unproven: shown, never obeyed.
  if (v[0] == '\0') return v.size() > 1 ? printable(v.substr(1), 300) : "no reason given";
  if (v[0] != '\1' || v.size() != 1 + kauth_mac || nonce_s_.empty()) return "malformed verdict";
  const std::string want =
      hmac_sha256(token_, mac_input("server", purpose_, nonce_c_, nonce_s_, payload_));
  if (!same_secret(v.data() + 1, kauth_mac, want.data(), want.size()))
    return "it accepted this process but could not prove it holds the job token";
  return {};
}

bool authenticate_client(stream& s, const std::string& token, const std::string& purpose,
                         const std::string& payload, net_clock::time_point deadline,
                         const std::string& self, const std::string& who) {
  auth_client c(token, purpose, payload);
  // Closed before its verdict: the server dropped this connection (it was
  // busy or out of descriptors); the caller may try again.
  auto closed = [&] {
    char b;
    size_t n = 0;
    for (;;) {
      switch (s.peek_some(&b, 1, n)) {
        case stream::io::done:
          return false;
        case stream::io::would_block:
          if (!wait_fd(s.fd(), s.read_wants(), deadline)) return false;  // read_all times out
          break;
        case stream::io::closed:
          return true;
        case stream::io::failed:
          return false;  // read_all names the error
      }
    }
  };
  if (closed()) return false;
  const std::string challenge = recv_frame(s, kmax_auth_frame, deadline, self, who);
  std::string hello;
  try {
    hello = c.answer(challenge);
  } catch (const error& e) {
    fail("{}: {}: {}", self, who, e.what());
  }
  try {
    send_frame(s, hello, deadline, self, who);
  } catch (const error&) {
    if (peer_closed(s)) return false;
    throw;
  }
  if (closed()) return false;
  const std::string why = c.verdict(recv_frame(s, kmax_auth_frame, deadline, self, who));
  if (!why.empty()) fail("{}: {} refused this process: {}", self, who, why);
  return true;
}

stream connect_authenticated(const sockaddr_in& a, const job_credentials& c,
                             const std::string& purpose, const std::string& payload,
                             net_clock::time_point deadline, const std::string& self,
                             const std::string& who) {
  for (;;) {
    stream s = tls_client(connect_tcp(a, deadline, self, who), c.tls.get(), deadline, self, who);
    if (s && authenticate_client(s, c.token, purpose, payload, deadline, self, who)) return s;
    if (net_clock::now() >= deadline)
      fail("{}: {} closed every connection before its verdict{}", self, who,
           c.tls ? "" : " (does it expect TLS?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

namespace {

// Writes all of `bytes` at once or not at all: true when written. For the
// handshake's short frames, which fit an empty socket buffer.
bool send_now(stream& s, const std::string& bytes) {
  size_t at = 0;
  while (at < bytes.size()) {
    size_t k = 0;
    if (s.write_some(bytes.data() + at, bytes.size() - at, k) != stream::io::done) return false;
    at += k;
  }
  return true;
}

}  // namespace

// One connection in the handshake: TLS's first (`in_tls`), then the
// challenge is sent and the hello is read into `in`.
struct auth_acceptor::pending {
  stream s;
  auth_server server;
  bool in_tls = false;
  std::string in;
  net_clock::time_point deadline;
  std::string peer;
  short events() const { return s.read_wants(); }
};

auth_acceptor::auth_acceptor(int listen_fd, job_credentials c, std::string purpose,
                             std::chrono::milliseconds per_connection, size_t max_pending)
    : listen_fd_(listen_fd),
      creds_(std::move(c)),
      purpose_(std::move(purpose)),
      per_connection_(per_connection),
      max_pending_(std::max<size_t>(1, max_pending)) {}

auth_acceptor::~auth_acceptor() = default;

void auth_acceptor::accept_new() {
  // When full, the rest wait in the kernel's listen queue: a pending peer is
  // never pushed out for a newer one.
  while (pending_.size() < max_pending_) {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    unique_fd c(
        ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!c) {
      // Out of file descriptors: the listener stays readable, so pause it
      // rather than spin.
      if (errno == EMFILE || errno == ENFILE)
        listener_paused_until_ = net_clock::now() + std::chrono::milliseconds(100);
      return;  // EAGAIN, or an aborted connection: nothing more now
    }
    set_nodelay(c.get());
    const bool tls = creds_.tls != nullptr;
    pending p{tls ? creds_.tls->wrap(std::move(c), true) : stream(std::move(c)),
              auth_server(creds_.token, purpose_),
              tls,
              {},
              net_clock::now() + per_connection_,
              fmt::format("{}:{}", ipv4_text(a), ntohs(a.sin_port))};
    if (!tls && !send_now(p.s, frame(p.server.challenge()))) {
      ++dropped_;
      continue;
    }
    pending_.push_back(std::move(p));
  }
}

// Moves `p`'s handshake on as far as what has arrived allows; true when
// `p` is finished (admitted into `out`, or dropped).
bool auth_acceptor::advance(pending& p, const decide_fn& decide, std::optional<admitted>& out) {
  while (p.in_tls) {
    const auto r = p.s.handshake();
    if (r == stream::io::would_block) return false;
    if (r != stream::io::done || !send_now(p.s, frame(p.server.challenge()))) {
      ++dropped_;
      return true;
    }
    p.in_tls = false;
  }
  for (;;) {
    const size_t want = p.in.size() < 8 ? 8 : 8 + get_le(p.in.data(), 8);
    if (p.in.size() >= 8 && want - 8 > kmax_auth_frame) break;  // too long: drop unread
    if (p.in.size() == want && want > 8) {
      std::string reason;
      const std::string_view body(p.in.data() + 8, p.in.size() - 8);
      bool ok = p.server.check(body, reason);
      if (ok) {
        reason = decide(p.server.payload());
        ok = reason.empty();
      }
      const bool sent = send_now(p.s, frame(ok ? p.server.accept() : auth_server::refuse(reason)));
      if (ok && sent) {
        out = admitted{std::move(p.s), p.server.payload(), p.peer};
        return true;
      }
      if (!ok && on_refused) on_refused(p.peer, reason);
      break;
    }
    char buf[512];
    size_t k = 0;
    const auto r = p.s.read_some(buf, std::min(sizeof buf, want - p.in.size()), k);
    if (r == stream::io::done) {
      p.in.append(buf, k);
      continue;
    }
    if (r == stream::io::would_block) return false;
    break;  // closed, reset or a TLS failure
  }
  ++dropped_;
  return true;
}
std::optional<auth_acceptor::admitted> auth_acceptor::next(net_clock::time_point deadline,
                                                           const decide_fn& decide, int stop_fd) {
  std::vector<pollfd> fds;
  for (;;) {
    const auto now = net_clock::now();
    // Drop the connections whose time is up.
    const size_t before = pending_.size();
    std::erase_if(pending_, [&](const pending& p) { return p.deadline <= now; });
    dropped_ += before - pending_.size();
    if (now >= deadline) return std::nullopt;
    auto wake = deadline;
    for (auto& p : pending_) wake = std::min(wake, p.deadline);
    const bool listen = pending_.size() < max_pending_ && now >= listener_paused_until_;
    if (!listen && pending_.size() < max_pending_) wake = std::min(wake, listener_paused_until_);
    fds.assign({{listen_fd_, short(listen ? POLLIN : 0), 0}});
    if (stop_fd >= 0) fds.push_back({stop_fd, POLLIN, 0});
    for (auto& p : pending_) fds.push_back({p.s.fd(), p.events(), 0});
    const int rc = ::poll(fds.data(), fds.size(), ms_left(wake));
    if (rc < 0 && errno != EINTR) fail("{}: poll: {}", purpose_, std::strerror(errno));
    if (rc <= 0) continue;
    if (stop_fd >= 0 && fds[1].revents) return std::nullopt;
    // Pending connections first (in poll order), then new ones.
    const size_t first = stop_fd >= 0 ? 2 : 1;
    std::optional<admitted> out;
    std::vector<bool> done(pending_.size(), false);
    for (size_t i = 0; i < pending_.size() && !out; ++i)
      if (fds[first + i].revents) done[i] = advance(pending_[i], decide, out);
    size_t kept = 0;
    for (size_t j = 0; j < pending_.size(); ++j)
      if (!done[j]) {
        if (kept != j) pending_[kept] = std::move(pending_[j]);
        ++kept;
      }
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(kept), pending_.end());
    if (out) return out;
    if (fds[0].revents) accept_new();
  }
}

std::string random_token() {
  std::string s;
  for (unsigned char c : random_bytes(16)) s += fmt::format("{:02x}", c);
  return s;
}

}  // namespace merak::job
