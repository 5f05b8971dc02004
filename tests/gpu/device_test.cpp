// Lists CUDA devices; skips (exit 77) where there is none.
#include <cstdio>

#include "gpu/device.hpp"

int main() {
  auto devs = merak::gpu::cuda_devices();
  if (devs.empty()) {
    std::printf("skipped: %s\n", merak::gpu::cuda_unavailable_reason().c_str());
    return 77;
  }
  for (auto& d : devs) {
    std::printf("cuda:%d %s sm_%d%d %.1f GiB\n", d.index, d.name.c_str(), d.sm_major, d.sm_minor,
                double(d.memory_bytes) / (1 << 30));
    if (d.memory_bytes == 0 || d.sm_major == 0) return 1;
  }
  return 0;
}
