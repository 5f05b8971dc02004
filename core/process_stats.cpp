#include "core/process_stats.hpp"

#include <cstdio>
#include <cstring>

namespace merak {
namespace {

int64_t read_status_kb(const char* key) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
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

}  // namespace merak
