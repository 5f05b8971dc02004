#pragma once
// Device-side helpers shared by the CUDA kernel files (gpu/*.cu only):
// loads into float and round-to-nearest-even stores for the activation
// types, warp and block reductions, deterministic column sums, launch sizes
// and launch checks. Each including file gets its own internal copies.
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

// dwpe (T, C) += the sum over the B rows of dout (B, T, C): a position
// table's gradient, in a fixed order per element.
template <typename A>
__global__ void positions_bwd(float* dwpe, const A* dout, int B, int T, int C) {
  const int64_t n = int64_t(T) * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float s = 0.f;
    for (int b = 0; b < B; ++b) s += ld(dout[int64_t(b) * n + i]);
    dwpe[i] += s;
  }
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

// Rows per block of the column sums; partial sums per (row block, column),
// then added in row-block order.
constexpr int kcol_rows = 64;

inline int row_blocks(int N) {
  return (N + kcol_rows - 1) / kcol_rows;
}

// partial[y][c] = sum over rows of block y of g[n][c] (and, with x given,
// partial[Y + y][c] of xhat * g, xhat = (x - mean) * rstd, mean 0 when
// null: the layer norm's and RMSNorm's weight gradients).
template <typename A>
__global__ void column_partials(float* partial, const A* g, const A* x, const float* mean,
                                const float* rstd, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (c >= C) return;
  const int n0 = y * kcol_rows, n1 = min(N, n0 + kcol_rows);
  float s = 0.f, sx = 0.f;
  for (int n = n0; n < n1; ++n) {
    const float v = ld(g[int64_t(n) * C + c]);
    s += v;
    if (x) sx += (ld(x[int64_t(n) * C + c]) - (mean ? mean[n] : 0.f)) * rstd[n] * v;
  }
  partial[int64_t(y) * C + c] = s;
  if (x) partial[int64_t(gridDim.y + y) * C + c] = sx;
}

// out[c] += sum over y of partial[y][c], y in order.
__global__ void column_finish(float* out, const float* partial, int Y, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0.f;
  for (int y = 0; y < Y; ++y) s += partial[int64_t(y) * C + c];
  out[c] += s;
}

template <typename A>
void column_sums_of(float* out, float* out_x, const A* g, const A* x, const float* mean,
                    const float* rstd, float* partial, int N, int C, cudaStream_t s) {
  const int Y = row_blocks(N);
  dim3 grid((C + kthreads - 1) / kthreads, Y);
  column_partials<<<grid, kthreads, 0, s>>>(partial, g, x, mean, rstd, N, C);
  column_finish<<<(C + kthreads - 1) / kthreads, kthreads, 0, s>>>(out, partial, Y, C);
  if (x)
    column_finish<<<(C + kthreads - 1) / kthreads, kthreads, 0, s>>>(
        out_x, partial + int64_t(Y) * C, Y, C);
}

}  // namespace
}  // namespace merak::gpu::kernels
