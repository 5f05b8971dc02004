#include "bench/worker_launch.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"

namespace merak::bench {

std::vector<std::string> own_argv(const std::string& what) {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  for (std::string a; std::getline(in, a, '\0');) args.push_back(a);
  if (args.empty()) fail("{}: cannot read /proc/self/cmdline", what);
  args[0] = job::self_executable();
  return args;
}

nlohmann::json launch_for_result(job::launch_options lo, const std::string& what) {
  char path[] = "/tmp/merak-bench-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) fail("{}: cannot create a temporary file", what);
  ::close(fd);
  lo.env["MERAK_BENCH_OUT"] = path;
  const auto res = job::launch_local(lo);
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  std::filesystem::remove(path);
  if (!res.ok()) fail("{}: {}", what, res.message);
  if (line.empty()) fail("{}: rank 0 wrote no result", what);
  return nlohmann::json::parse(line);
}

}  // namespace merak::bench
