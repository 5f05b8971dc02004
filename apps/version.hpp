#pragma once
// The text of `merak --version`: merak's version, git commit and build type,
// then the versions of the libraries it was built with (CAF, UCX, oneDNN,
// OpenSSL, CUDA, NCCL; "none" for those this build went without).

#include <string>

namespace merak::apps {

std::string version_text();

}  // namespace merak::apps
