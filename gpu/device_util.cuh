#pragma once
// Device-side helpers shared by the CUDA kernel files (gpu/*.cu only):
// loads into float and round-to-nearest-even stores for the activation
// types, warp and block reductions, launch sizes and launch checks. Each
// including file gets its own internal copies.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "gpu/cuda_util.hpp"

namespace merak::gpu::kernels {
namespace {

using bf = __nv_bfloat16;

__device__ __forceinline__ float ld(float x) {
  return x;
}
__device__ __forceinline__ float ld(bf x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ void st(float& d, float v) {
  d = v;
}
__device__ __forceinline__ void st(bf& d, float v) {
  d = __float2bfloat16_rn(v);
}

constexpr int kthreads = 256;

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum (or max) over the block; every thread gets the result. `buf` holds
// 32 floats of shared memory; blockDim.x is a multiple of 32.
__device__ inline float block_reduce(float v, bool max, float* buf) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = max ? warp_max(v) : warp_sum(v);
  __syncthreads();  // buf may still be read by a previous reduction
  if (lane == 0) buf[warp] = v;
  __syncthreads();
  float r = lane < warps ? buf[lane] : (max ? -INFINITY : 0.f);
  return max ? warp_max(r) : warp_sum(r);
}

// Blocks of a grid-stride loop over n elements: at least one (a launch of
// none is an error), at most enough to fill the device several times over.
inline int blocks_for(int64_t n, int per = kthreads) {
  return int(std::clamp<int64_t>((n + per - 1) / per, 1, 65535LL * 8));
}

inline void check_launch(const char* what) {
  check_cuda(cudaGetLastError(), what);
}

// Calls f with the activation type the flag names.
template <typename F>
void with_type(bool bf16, F&& f) {
  if (bf16)
    f(bf{});
  else
    f(float{});
}

}  // namespace
}  // namespace merak::gpu::kernels
