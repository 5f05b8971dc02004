#include "apps/tls_flags.hpp"

#include <stdlib.h>
#include <CLI/CLI.hpp>

#include <filesystem>

#include "core/error.hpp"

namespace merak::apps {

void add_tls_flags(CLI::App& c, job::tls_files& f) {
  c.add_option("--tls-cert", f.cert,
               "TLS: this host's certificate (PEM); with --tls-key and --tls-ca every connection "
               "of the job is encrypted and both ends show certificates of that CA (default: "
               "MERAK_TLS_CERT)");
  c.add_option("--tls-key", f.key,
               "TLS: the certificate's private key (PEM, mode 0600; default: MERAK_TLS_KEY)");
  c.add_option("--tls-ca", f.ca,
               "TLS: the job's CA certificate, which every peer's must chain to (default: "
               "MERAK_TLS_CA)");
}

job::tls_files use_tls_flags(const job::tls_files& given, const std::string& who) {
  try {
    job::tls_files f = given;
    if (f.enabled())
      job::check_complete(f, "--tls-cert, --tls-key and --tls-ca");
    else
      f = job::tls_files_from_env();
    if (!f.enabled()) return f;
    for (std::string* p : {&f.cert, &f.key, &f.ca}) {
      std::error_code ec;
      const auto abs = std::filesystem::absolute(*p, ec);
      if (!ec) *p = abs.string();
    }
    job::tls_context check(f);
    ::setenv("MERAK_TLS_CERT", f.cert.c_str(), 1);
    ::setenv("MERAK_TLS_KEY", f.key.c_str(), 1);
    ::setenv("MERAK_TLS_CA", f.ca.c_str(), 1);
    return f;
  } catch (const error& e) {
    fail("{}: {}", who, e.what());
  }
}

}  // namespace merak::apps
