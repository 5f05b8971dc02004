// `merak --version`: what this build is and what it was built with.
#include "apps/version.hpp"

#include <fmt/format.h>
#include <openssl/opensslv.h>
#include <caf/config.hpp>

#include "merak_commit.hpp"  // generated at build time (cmake/merak_commit.cmake)

namespace merak::apps {

std::string version_text() {
  std::string s = fmt::format("merak {} (commit {}, {} build{})\n", MERAK_VERSION, MERAK_GIT_COMMIT,
                              MERAK_BUILD_TYPE, MERAK_NATIVE_BUILD ? ", -march=native" : "");
  s += fmt::format("built with: CAF {}.{}.{}, {}, {}", CAF_VERSION / 10000, CAF_VERSION / 100 % 100,
                   CAF_VERSION % 100, MERAK_UCX_TEXT, MERAK_DNNL_TEXT);
  s += fmt::format(", OpenSSL {}", OPENSSL_VERSION_STR);
  s += fmt::format(", {}, {}, {}\n", MERAK_CUDA_TEXT, MERAK_CUDNN_TEXT, MERAK_NCCL_TEXT);
  return s;
}

}  // namespace merak::apps
