// The CUDA backend as a module merak loads when a command asks for a GPU
// (apps/device_flag.cpp), so that merak itself neither links nor loads
// CUDA's libraries (cuBLASLt alone is half a gigabyte to map). The module
// holds gpu/'s code only: the model code it calls and registers with is the
// loading program's (exported from it), so both share one registry.
#include <cstddef>
#include <cstring>
#include <exception>

#include "gpu/cuda_backend.hpp"

extern "C" {

// Enables CUDA devices for model::tensor and model::backend_for. Returns 0,
// or 1 with the reason in `why` (at most n bytes with its terminator).
__attribute__((visibility("default"))) int merak_cuda_enable(char* why, size_t n) {
  try {
    merak::gpu::enable_cuda();
    return 0;
  } catch (const std::exception& e) {
    if (n > 0) {
      std::strncpy(why, e.what(), n - 1);
      why[n - 1] = '\0';
    }
    return 1;
  }
}
}
