#include "core/process_stats.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace merak {
namespace {

int64_t read_status_kb(const char* key, const char* file = "/proc/self/status") {
  std::FILE* f = std::fopen(file, "r");
  if (!f) return 0;
  char line[256];
  int64_t kb = 0;
  size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, key, n) == 0) {
      std::sscanf(line + n, " %lld", reinterpret_cast<long long*>(&kb));
      break;
    }
  }
  std::fclose(f);
  return kb;
}

}  // namespace

int64_t peak_rss_bytes() {
  return read_status_kb("VmHWM:") * 1024;
}
int64_t current_rss_bytes() {
  return read_status_kb("VmRSS:") * 1024;
}

int64_t available_memory_bytes() {
  int64_t most = -1;
  if (const int64_t kb = read_status_kb("MemAvailable:", "/proc/meminfo"); kb > 0) most = kb * 1024;
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    const int64_t left =
        std::max<int64_t>(0, int64_t(limit.rlim_cur) - read_status_kb("VmSize:") * 1024);
    most = most < 0 ? left : std::min(most, left);
  }
  return most;
}

}  // namespace merak
