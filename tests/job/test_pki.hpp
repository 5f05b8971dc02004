#pragma once
// TLS files for tests, made by deploy/tls-certs.sh (the script users run)
// in a fresh temporary directory that is removed afterwards.

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "job/tls.hpp"

namespace merak::test {

class test_pki {
 public:
  // A CA, and a certificate it signs for each name.
  explicit test_pki(const std::vector<std::string>& names) {
    char tmpl[] = "/tmp/merak-pki-XXXXXX";
    if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    std::string cmd = std::string("bash '") + MERAK_TLS_CERTS_SCRIPT + "' '" + dir_ + "'";
    for (auto& n : names) cmd += " '" + n + "'";
    cmd += " >/dev/null";
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("deploy/tls-certs.sh failed");
  }
  ~test_pki() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  test_pki(const test_pki&) = delete;
  test_pki& operator=(const test_pki&) = delete;

  const std::string& dir() const { return dir_; }
  job::tls_files files(const std::string& name) const {
    return {dir_ + "/" + name + ".pem", dir_ + "/" + name + ".key", dir_ + "/ca.pem"};
  }

 private:
  std::string dir_;
};

}  // namespace merak::test
