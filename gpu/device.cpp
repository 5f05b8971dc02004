#include "gpu/device.hpp"

#include <cuda_runtime_api.h>

namespace merak::gpu {

std::vector<device_info> cuda_devices() {
  int n = 0;  // left untouched by cudaGetDeviceCount when there is no driver
  if (cudaGetDeviceCount(&n) != cudaSuccess) return {};
  std::vector<device_info> out;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    out.push_back({i, p.name, p.totalGlobalMem, p.major, p.minor});
  }
  return out;
}

std::string cuda_unavailable_reason() {
  int n = 0;
  auto st = cudaGetDeviceCount(&n);
  if (st == cudaSuccess && n > 0) return "";
  if (st == cudaSuccess) return "no CUDA device";
  return cudaGetErrorString(st);
}

}  // namespace merak::gpu
