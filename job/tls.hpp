#pragma once
// Optional TLS for a job's connections (docs/security.md): the bootstrap,
// the gates in front of the training processes' and the SVM workers' actor
// ports. TLS 1.3 only, and mutual: each side presents a certificate and
// checks the other's against the job's certificate authority (`ca`); a
// certificate that authority did not sign ends the connection in the TLS
// handshake, before merak's own handshake (job/auth.hpp), which still
// runs inside the session. Host names are not checked: the CA and the job
// token together say who belongs to the job.

#include <functional>
#include <memory>
#include <string>

#include "job/socket_io.hpp"

struct ssl_ctx_st;  // OpenSSL's SSL_CTX

namespace merak::job {

// The three files of TLS: all set, or none.
struct tls_files {
  std::string cert;  // PEM: this process's certificate (and its chain)
  std::string key;   // PEM: its private key; group and others may not read it
  std::string ca;    // PEM: the certificates a peer's must chain to
  bool enabled() const { return !cert.empty() || !key.empty() || !ca.empty(); }
};

// The files from MERAK_TLS_CERT, MERAK_TLS_KEY and MERAK_TLS_CA (a
// launcher sets these for its workers). All three or none; throws
// merak::error naming the missing ones.
tls_files tls_files_from_env(const std::function<const char*(const char*)>& env);
tls_files tls_files_from_env();  // the process environment
// Throws merak::error (naming the flags or variables of `what`) unless all
// three files are set or none is.
void check_complete(const tls_files& f, const char* what);

class tls_context {
 public:
  // Loads the certificate, the key and the CA. Throws merak::error naming
  // the file and why (missing, unreadable by this user or readable by
  // others for the key, not PEM, key not matching the certificate).
  explicit tls_context(const tls_files& f);
  ~tls_context();
  tls_context(const tls_context&) = delete;
  tls_context& operator=(const tls_context&) = delete;

  // A stream on a connected socket whose handshake (stream::handshake) has
  // not run yet; the server side of it when `server`.
  stream wrap(unique_fd fd, bool server) const;
  const tls_files& files() const { return files_; }

 private:
  ssl_ctx_st* ctx_ = nullptr;
  tls_files files_;
};

// The TLS context of `f`, or null when `f` is empty.
std::shared_ptr<const tls_context> make_tls(const tls_files& f);

// The client side of a connection: TLS's handshake when `tls` is set
// (blocking until `deadline`), the socket in clear otherwise. Throws
// merak::error naming `self` and `who` when the handshake fails (with
// OpenSSL's reason and, for a refused certificate, why). Returns an empty
// stream when the peer closed the connection during the handshake (busy:
// try again).
stream tls_client(unique_fd fd, const tls_context* tls, net_clock::time_point deadline,
                  const std::string& self, const std::string& who);

}  // namespace merak::job
