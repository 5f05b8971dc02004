// merak: runs `merak svm ...` itself and hands every other command line to
// merak-full (next to this program) by exec. The split keeps what an SVM fit
// does not use (UCX, OpenBLAS, oneDNN) out of its process: loading them
// would cost every start more than LIBLINEAR takes to fit a small data set
// (docs/results/svm.md, "Solver design choices").
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "apps/cli_main.hpp"
#include "job/openmp_spin.hpp"

namespace {

// merak-full in this program's directory; empty when that is unknown (no
// /proc): never one found in the current directory.
std::string full_program() {
  char self[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return {};
  const std::string path(self, size_t(n));
  return path.substr(0, path.rfind('/')) + "/merak-full";
}

// The sub-command: the first word after the global flags (--log-level
// LEVEL, --skip-checksum, ...).
std::string sub_command(int argc, char** argv) {
  int i = 1;
  while (i < argc && std::string(argv[i]).rfind("--", 0) == 0)
    i += std::string(argv[i]) == "--log-level" ? 2 : 1;
  return i < argc ? argv[i] : "";
}

}  // namespace

int main(int argc, char** argv) {
  namespace ma = merak::apps;
  if (sub_command(argc, argv) == "svm") {
    ma::keep_large_blocks_in_heap();
    const ma::command_entry commands[] = {{"svm", ma::add_svm_command}};
    return ma::run_cli(argc, argv, commands, 1);
  }
  const std::string full = full_program();
  if (full.empty()) {
    std::fprintf(stderr, "merak: error: cannot find merak-full: /proc/self/exe is unreadable\n");
    return 127;
  }
  // One of several processes of a job on this host: OpenMP's idle threads
  // must not hold cores the others need (job/openmp_spin.hpp).
  const auto get = [](const char* name) { return static_cast<const char*>(std::getenv(name)); };
  if (merak::job::wants_short_openmp_spin(get, merak::job::processes_on_host(get)))
    ::setenv(merak::job::kopenmp_spin_variable, merak::job::kshared_host_openmp_spin, 1);
  ::execv(full.c_str(), argv);
  std::fprintf(stderr, "merak: error: cannot run %s: %s\n", full.c_str(), std::strerror(errno));
  return 127;
}
