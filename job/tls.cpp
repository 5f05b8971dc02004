#include "job/tls.hpp"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"

namespace merak::job {
namespace {

std::string openssl_reason() {
  const std::string why = ssl_errors();
  return why.empty() ? "unknown OpenSSL error" : why;
}

// A regular file this process can read; for a key, one that neither group
// nor others may read or write.
void check_file(const std::string& path, const char* what, bool secret) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail("TLS {} '{}': {}", what, path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("TLS {} '{}': not a regular file", what, path);
  if (secret && (st.st_mode & 077))
    fail("TLS {} '{}' may be read by group or others (mode {:04o}); chmod 600 it", what, path,
         st.st_mode & 07777);
}

// A socket BIO whose writes never raise SIGPIPE (send with MSG_NOSIGNAL):
// a peer that went away is an error to report, not a signal that kills
// the process. Everything else is OpenSSL's socket BIO.
int send_nosignal(BIO* b, const char* data, int len) {
  int fd = -1;
  BIO_get_fd(b, &fd);
  BIO_clear_retry_flags(b);
  const ssize_t n = ::send(fd, data, size_t(len), MSG_NOSIGNAL);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_write(b);
  return static_cast<int>(n);
}

const BIO_METHOD* socket_method() {
  static const BIO_METHOD* m = [] {
    const BIO_METHOD* base = BIO_s_socket();
    BIO_METHOD* x = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR,
                                 "merak socket");
    if (!x) return base;
    BIO_meth_set_write(x, send_nosignal);
    BIO_meth_set_read(x, BIO_meth_get_read(base));
    BIO_meth_set_puts(x, BIO_meth_get_puts(base));
    BIO_meth_set_ctrl(x, BIO_meth_get_ctrl(base));
    BIO_meth_set_create(x, BIO_meth_get_create(base));
    BIO_meth_set_destroy(x, BIO_meth_get_destroy(base));
    return static_cast<const BIO_METHOD*>(x);
  }();
  return m;
}

}  // namespace

tls_files tls_files_from_env(const std::function<const char*(const char*)>& env) {
  auto get = [&](const char* v) {
    const char* s = env(v);
    return std::string(s ? s : "");
  };
  tls_files f{get("MERAK_TLS_CERT"), get("MERAK_TLS_KEY"), get("MERAK_TLS_CA")};
  check_complete(f, "MERAK_TLS_CERT, MERAK_TLS_KEY and MERAK_TLS_CA");
  return f;
}

tls_files tls_files_from_env() {
  return tls_files_from_env([](const char* v) { return std::getenv(v); });
}

void check_complete(const tls_files& f, const char* what) {
  if (!f.enabled() || (!f.cert.empty() && !f.key.empty() && !f.ca.empty())) return;
  std::string missing;
  int n = 0;
  for (auto [v, name] : {std::pair{&f.cert, "certificate"}, {&f.key, "key"}, {&f.ca, "CA"}})
    if (v->empty()) missing += fmt::format("{}{}", n++ ? " and the " : "", name);
  fail("TLS needs {} together: the {} {} missing", what, missing, n > 1 ? "are" : "is");
}

tls_context::tls_context(const tls_files& f) : files_(f) {
  check_complete(f, "a certificate, a key and a CA");
  check_file(f.cert, "certificate", false);
  check_file(f.key, "key", true);
  check_file(f.ca, "CA", false);
  ERR_clear_error();
  ctx_ = SSL_CTX_new(TLS_method());
  if (!ctx_) fail("TLS: {}", openssl_reason());
  // `subject`: what failed, e.g. "certificate 'host.pem'".
  auto must = [&](int ok, const std::string& subject) {
    if (ok != 1) {
      const std::string why = openssl_reason();
      SSL_CTX_free(ctx_);
      ctx_ = nullptr;
      fail("TLS {}: {}", subject, why);
    }
  };
  must(SSL_CTX_set_min_proto_version(ctx_, TLS1_3_VERSION), "setup of TLS 1.3");
  must(SSL_CTX_use_certificate_chain_file(ctx_, f.cert.c_str()),
       fmt::format("certificate '{}'", f.cert));
  const std::string key_of = fmt::format("key '{}' (of certificate '{}')", f.key, f.cert);
  must(SSL_CTX_use_PrivateKey_file(ctx_, f.key.c_str(), SSL_FILETYPE_PEM), key_of);
  must(SSL_CTX_check_private_key(ctx_), key_of);
  must(SSL_CTX_load_verify_locations(ctx_, f.ca.c_str(), nullptr), fmt::format("CA '{}'", f.ca));
  SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  // A stream ends at its frames' boundaries, which merak's protocols check
  // themselves: a peer that exits without close_notify has simply closed.
  SSL_CTX_set_options(ctx_, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_mode(ctx_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
}

tls_context::~tls_context() {
  if (ctx_) SSL_CTX_free(ctx_);
}

stream tls_context::wrap(unique_fd fd, bool server) const {
  ERR_clear_error();
  SSL* ssl = SSL_new(ctx_);
  if (!ssl) fail("TLS: {}", openssl_reason());
  BIO* bio = BIO_new(socket_method());
  if (!bio) {
    SSL_free(ssl);
    fail("TLS: {}", openssl_reason());
  }
  BIO_set_fd(bio, fd.get(), BIO_NOCLOSE);
  SSL_set_bio(ssl, bio, bio);
  if (server)
    SSL_set_accept_state(ssl);
  else
    SSL_set_connect_state(ssl);
  return stream(std::move(fd), ssl);
}

std::shared_ptr<const tls_context> make_tls(const tls_files& f) {
  if (!f.enabled()) return nullptr;
  return std::make_shared<const tls_context>(f);
}

stream tls_client(unique_fd fd, const tls_context* tls, net_clock::time_point deadline,
                  const std::string& self, const std::string& who) {
  if (!tls) return stream(std::move(fd));
  stream s = tls->wrap(std::move(fd), false);
  for (;;) {
    switch (s.handshake()) {
      case stream::io::done:
        return s;
      case stream::io::would_block:
        if (!wait_fd(s.fd(), s.read_wants(), deadline))
          fail("{}: TLS handshake with {} timed out (does it use TLS?)", self, who);
        break;
      case stream::io::closed:
        return {};
      case stream::io::failed:
        fail(
            "{}: TLS handshake with {} failed: {} (do both sides use TLS, with certificates "
            "of one CA?)",
            self, who, s.error());
    }
  }
}

}  // namespace merak::job
