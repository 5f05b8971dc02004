#pragma once
// CUDA devices as seen by this process.

#include <string>
#include <vector>

namespace merak::gpu {

struct device_info {
  int index = 0;
  std::string name;
  size_t memory_bytes = 0;
  int sm_major = 0, sm_minor = 0;
};

// Usable CUDA devices; empty (never an error) where there is no driver or
// no GPU, so callers and tests can fall back or skip.
std::vector<device_info> cuda_devices();

// Why no device is usable ("no CUDA driver", ...), or "" when one is.
std::string cuda_unavailable_reason();

}  // namespace merak::gpu
