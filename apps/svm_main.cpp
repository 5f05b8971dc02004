// merak: runs `merak svm ...` itself and hands every other command line to
// merak-full (next to this program) by exec. The split keeps what an SVM fit
// does not use (UCX, OpenBLAS, oneDNN) out of its process: linking them
// costs every start about 13 ms on a 2-core VM (docs/svm.md), more than
// LIBLINEAR takes to fit heart_scale.
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <string>

#include "apps/cli_main.hpp"

namespace {

// merak-full in this program's directory.
std::string full_program() {
  char self[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  std::string dir = n > 0 ? std::string(self, size_t(n)) : std::string();
  const size_t slash = dir.rfind('/');
  dir = slash == std::string::npos ? std::string(".") : dir.substr(0, slash);
  return dir + "/merak-full";
}

}  // namespace

int main(int argc, char** argv) {
  namespace ma = merak::apps;
  if (argc > 1 && std::string(argv[1]) == "svm") {
    ma::keep_large_blocks_in_heap();
    const ma::command_entry commands[] = {{"svm", ma::add_svm_command}};
    return ma::run_cli(argc, argv, commands, 1);
  }
  const std::string full = full_program();
  ::execv(full.c_str(), argv);
  std::fprintf(stderr, "merak: error: cannot run %s: %s\n", full.c_str(), std::strerror(errno));
  return 1;
}
