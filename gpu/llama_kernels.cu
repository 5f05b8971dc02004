// CUDA kernels of the Llama family (kernels.hpp): RMSNorm, rotary position
// embedding and SwiGLU, written once over the activation type A (float or
// __nv_bfloat16) with float arithmetic, as the CPU kernels are.
#include "gpu/device_util.cuh"
#include "gpu/kernels.hpp"

namespace merak::gpu::kernels {
namespace {

// ---- RMSNorm -------------------------------------------------------------

// One warp per row: rstd = 1/sqrt(mean(x^2) + eps), out = x * rstd * w.
template <typename A>
__global__ void rmsnorm_fwd(A* out, float* rstd, const A* in, const float* w, float eps, int N,
                            int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const A* x = in + int64_t(row) * C;
  A* o = out + int64_t(row) * C;
  float ss = 0.f;
  for (int c = lane; c < C; c += 32) ss += ld(x[c]) * ld(x[c]);
  const float r = 1.0f / sqrtf(warp_sum(ss) / C + eps);
  for (int c = lane; c < C; c += 32) st(o[c], ld(x[c]) * r * w[c]);
  if (lane == 0) rstd[row] = r;
}

// din += r (w dout - xhat mean(w dout xhat)), xhat = x r; one warp per row.
template <typename A>
__global__ void rmsnorm_bwd_rows(A* din, const A* dout, const A* in, const float* w,
                                 const float* rstd, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const int64_t off = int64_t(row) * C;
  const float r = rstd[row];
  float m = 0.f;
  for (int c = lane; c < C; c += 32) m += w[c] * ld(dout[off + c]) * ld(in[off + c]) * r;
  m = warp_sum(m) / C;
  for (int c = lane; c < C; c += 32) {
    const float xhat = ld(in[off + c]) * r;
    st(din[off + c], ld(din[off + c]) + (w[c] * ld(dout[off + c]) - xhat * m) * r);
  }
}

// ---- rotary position embedding -------------------------------------------

// cos and sin of (pos_offset + t) * theta^(-2i/hs), formed in double and
// rounded to float, as the CPU kernel's table.
__device__ __forceinline__ void rotation(int t, int i, int hs, float theta, int pos_offset,
                                         float& c, float& s) {
  const double inv_freq = pow(double(theta), -2.0 * i / hs);
  const double angle = double(int64_t(pos_offset) + t) * inv_freq;
  c = float(cos(angle));
  s = float(sin(angle));
}

// One thread per (row, rotated pair) or per copied channel. Forward: y = the
// rotation of x (copied channels copied; y may alias x). Backward: y += the
// inverse rotation of x (copied channels added).
template <bool backward, typename A>
__global__ void rope_k(A* y_all, const A* x_all, int64_t BT, int T, int CR, int RH, int hs,
                       float theta, int pos_offset) {
  const int half = hs / 2, pairs = RH * half, copied = CR - RH * hs, per_row = pairs + copied;
  const int64_t n = BT * per_row;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = e / per_row;
    const int k = int(e % per_row);
    const A* x = x_all + row * CR;
    A* y = y_all + row * CR;
    if (k >= pairs) {
      const int ch = RH * hs + (k - pairs);
      if (backward)
        st(y[ch], ld(y[ch]) + ld(x[ch]));
      else if (y != x)
        y[ch] = x[ch];
      continue;
    }
    const int h = k / half, i = k % half;
    float c, s;
    rotation(int(row % T), i, hs, theta, pos_offset, c, s);
    const float x1 = ld(x[h * hs + i]), x2 = ld(x[h * hs + i + half]);
    if (backward) {
      st(y[h * hs + i], ld(y[h * hs + i]) + x1 * c + x2 * s);
      st(y[h * hs + i + half], ld(y[h * hs + i + half]) + x2 * c - x1 * s);
    } else {
      st(y[h * hs + i], x1 * c - x2 * s);
      st(y[h * hs + i + half], x2 * c + x1 * s);
    }
  }
}

// ---- SwiGLU --------------------------------------------------------------

template <typename A>
__global__ void swiglu_fwd(A* out, const A* in, int64_t N, int F) {
  const int64_t n = N * F;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = e / F;
    const int f = int(e % F);
    const float g = ld(in[row * 2 * F + f]), u = ld(in[row * 2 * F + F + f]);
    const float sig = 1.0f / (1.0f + __expf(-g));
    st(out[e], g * sig * u);
  }
}

// d gate += dout up silu'(gate), silu'(g) = sig (1 + g (1 - sig)); d up += dout silu(gate).
template <typename A>
__global__ void swiglu_bwd(A* din, const A* in, const A* dout, int64_t N, int F) {
  const int64_t n = N * F;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = e / F;
    const int f = int(e % F);
    const int64_t gi = row * 2 * F + f, ui = gi + F;
    const float g = ld(in[gi]), u = ld(in[ui]), dy = ld(dout[e]);
    const float sig = 1.0f / (1.0f + __expf(-g));
    st(din[gi], ld(din[gi]) + dy * u * sig * (1.0f + g * (1.0f - sig)));
    st(din[ui], ld(din[ui]) + dy * g * sig);
  }
}

}  // namespace

void rmsnorm_forward(bool bf16, void* out, float* rstd, const void* in, const float* weight,
                     float eps, int N, int C, cudaStream_t s) {
  with_type(bf16, [&](auto a) {
    using A = decltype(a);
    const int rows = kthreads / 32;
    rmsnorm_fwd<<<(N + rows - 1) / rows, kthreads, 0, s>>>(
        static_cast<A*>(out), rstd, static_cast<const A*>(in), weight, eps, N, C);
  });
  check_launch("rmsnorm forward");
}

void rmsnorm_backward(bool bf16, void* din, float* dweight, const void* dout, const void* in,
                      const float* weight, const float* rstd, float* partial, int N, int C,
                      cudaStream_t s) {
  with_type(bf16, [&](auto a) {
    using A = decltype(a);
    const A* g = static_cast<const A*>(dout);
    const A* x = static_cast<const A*>(in);
    const int rows = kthreads / 32;
    rmsnorm_bwd_rows<<<(N + rows - 1) / rows, kthreads, 0, s>>>(static_cast<A*>(din), g, x, weight,
                                                                rstd, N, C);
    // Only the x-weighted half of the partial sums is the weight's gradient.
    const int Y = row_blocks(N), column_blocks = (C + kthreads - 1) / kthreads;
    column_partials<<<dim3(column_blocks, Y), kthreads, 0, s>>>(partial, g, x, nullptr, rstd, N, C);
    column_finish<<<column_blocks, kthreads, 0, s>>>(dweight, partial + int64_t(Y) * C, Y, C);
  });
  check_launch("rmsnorm backward");
}

void rope_forward(bool bf16, void* out, const void* in, int B, int T, int CR, int RH, int hs,
                  float theta, int pos_offset, cudaStream_t s) {
  with_type(bf16, [&](auto a) {
    using A = decltype(a);
    const int64_t n = int64_t(B) * T * (CR - RH * hs / 2);
    rope_k<false><<<blocks_for(n), kthreads, 0, s>>>(static_cast<A*>(out),
                                                     static_cast<const A*>(in), int64_t(B) * T, T,
                                                     CR, RH, hs, theta, pos_offset);
  });
  check_launch("rope forward");
}

void rope_backward(bool bf16, void* din, const void* dout, int B, int T, int CR, int RH, int hs,
                   float theta, int pos_offset, cudaStream_t s) {
  with_type(bf16, [&](auto a) {
    using A = decltype(a);
    const int64_t n = int64_t(B) * T * (CR - RH * hs / 2);
    rope_k<true><<<blocks_for(n), kthreads, 0, s>>>(static_cast<A*>(din),
                                                    static_cast<const A*>(dout), int64_t(B) * T, T,
                                                    CR, RH, hs, theta, pos_offset);
  });
  check_launch("rope backward");
}

void swiglu_forward(bool bf16, void* out, const void* in, int N, int F, cudaStream_t s) {
  with_type(bf16, [&](auto a) {
    using A = decltype(a);
    swiglu_fwd<<<blocks_for(int64_t(N) * F), kthreads, 0, s>>>(
        static_cast<A*>(out), static_cast<const A*>(in), int64_t(N), F);
  });
  check_launch("swiglu forward");
}

void swiglu_backward(bool bf16, void* din, const void* in, const void* dout, int N, int F,
                     cudaStream_t s) {
  with_type(bf16, [&](auto a) {
    using A = decltype(a);
    swiglu_bwd<<<blocks_for(int64_t(N) * F), kthreads, 0, s>>>(
        static_cast<A*>(din), static_cast<const A*>(in), static_cast<const A*>(dout), int64_t(N),
        F);
  });
  check_launch("swiglu backward");
}

}  // namespace merak::gpu::kernels
