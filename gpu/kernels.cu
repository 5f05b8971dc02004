// CUDA kernels of the GPT family (kernels.hpp). Every kernel is written once
// over the activation type A (float or __nv_bfloat16), loading into float
// and storing with round-to-nearest-even, as the CPU kernels do.
#include "gpu/kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "gpu/cuda_util.hpp"
#include "gpu/device_util.cuh"

namespace merak::gpu::kernels {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

// ---- encoder -------------------------------------------------------------

template <typename A>
__global__ void encoder_fwd(A* out, const int32_t* tok, const float* wte, const float* wpe,
                            int64_t BT, int T, int C) {
  const int64_t n = BT * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bt = i / C;
    const int c = int(i % C), t = int(bt % T);
    st(out[i], wte[int64_t(tok[bt]) * C + c] + wpe[int64_t(t) * C + c]);
  }
}

template <typename A>
__global__ void encoder_bwd_wte(float* dwte, const A* dout, const int32_t* tok, int64_t BT, int C) {
  const int64_t n = BT * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bt = i / C;
    atomicAdd(&dwte[int64_t(tok[bt]) * C + i % C], ld(dout[i]));
  }
}

// ---- layer norm ----------------------------------------------------------

template <typename A>
__global__ void layernorm_fwd(A* out, float* mean, float* rstd, const A* in, const float* w,
                              const float* b, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const A* x = in + int64_t(row) * C;
  A* o = out + int64_t(row) * C;
  float s = 0.f;
  for (int c = lane; c < C; c += 32) s += ld(x[c]);
  const float m = warp_sum(s) / C;
  float v = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float d = ld(x[c]) - m;
    v += d * d;
  }
  const float r = rsqrtf(warp_sum(v) / C + 1e-5f);
  for (int c = lane; c < C; c += 32) st(o[c], (ld(x[c]) - m) * r * w[c] + b[c]);
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

template <typename A>
__global__ void layernorm_bwd_rows(A* din, const A* dout, const A* in, const float* w,
                                   const float* mean, const float* rstd, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const int64_t off = int64_t(row) * C;
  const float m = mean[row], r = rstd[row];
  float a = 0.f, b = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float xhat = (ld(in[off + c]) - m) * r, dn = w[c] * ld(dout[off + c]);
    a += dn;
    b += dn * xhat;
  }
  a = warp_sum(a) / C;
  b = warp_sum(b) / C;
  for (int c = lane; c < C; c += 32) {
    const float xhat = (ld(in[off + c]) - m) * r, dn = w[c] * ld(dout[off + c]);
    st(din[off + c], ld(din[off + c]) + (dn - a - xhat * b) * r);
  }
}

// ---- element-wise --------------------------------------------------------

template <typename A>
__global__ void bias_fwd(A* out, const A* in, const float* bias, int64_t n, int C) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    st(out[i], ld(in[i]) + bias[i % C]);
}

template <typename A>
__global__ void gelu_fwd(A* out, const A* in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float x = ld(in[i]), u = kSqrt2OverPi * (x + kCubic * x * x * x);
    st(out[i], 0.5f * x * (1.0f + tanhf(u)));
  }
}

template <typename A>
__global__ void gelu_bwd(A* din, const A* in, const A* dout, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float x = ld(in[i]), u = kSqrt2OverPi * (x + kCubic * x * x * x), th = tanhf(u);
    const float local = 0.5f * (1.0f + th) +
                        0.5f * x * (1.0f - th * th) * kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    st(din[i], ld(din[i]) + local * ld(dout[i]));
  }
}

template <typename A>
__global__ void residual_fwd(A* out, const A* a, const A* b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    st(out[i], ld(a[i]) + ld(b[i]));
}

template <typename A>
__global__ void residual_bwd(A* da, A* db, const A* dout, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float g = ld(dout[i]);
    st(da[i], ld(da[i]) + g);
    st(db[i], ld(db[i]) + g);
  }
}

template <typename D, typename S>
__global__ void convert_k(D* dst, const S* src, int64_t n, bool accumulate) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    st(dst[i], (accumulate ? ld(dst[i]) : 0.f) + ld(src[i]));
}

// ---- attention -----------------------------------------------------------

// Attention runs as batched GEMMs over (batch x head) on per-head copies of
// Q, K and V; the kernels here gather those copies, take the causal softmax
// and its backward row by row, and put the results back.

// dst (B,NH,T,hs)[b][h][t][d] = src (B,T,W)[b][t][offset + (h / rep) hs + d].
template <typename A>
__global__ void gather_heads_k(A* dst, const A* src, int64_t W, int64_t offset, int T, int NH,
                               int hs, int rep, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int d = int(e % hs);
    const int64_t bht = e / hs;
    const int t = int(bht % T), h = int((bht / T) % NH);
    const int64_t b = bht / (int64_t(T) * NH);
    dst[e] = src[(b * T + t) * W + offset + int64_t(h / rep) * hs + d];
  }
}

// out (B,T,C)[b][t][h hs + d] = o (B,NH,T,hs)[b][h][t][d].
template <typename A>
__global__ void scatter_heads_k(A* out, const A* o, int T, int NH, int hs, int64_t n) {
  const int64_t C = int64_t(NH) * hs;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int d = int(e % hs);
    const int64_t bt = e / hs / NH;  // e walks out: (b, t, h, d)
    const int h = int((e / hs) % NH), t = int(bt % T);
    const int64_t b = bt / T;
    out[bt * C + int64_t(h) * hs + d] = o[((b * NH + h) * T + t) * hs + d];
  }
}

// dst (B,T,W)[b][t][offset + g hs + d] += the sum over the group's heads
// h = g rep .. g rep + rep - 1, in order, of src (B,NH,T,hs)[b][h][t][d].
template <typename A>
__global__ void scatter_add_heads_k(A* dst, const float* src, int64_t W, int64_t offset, int T,
                                    int NH, int hs, int rep, int64_t n) {
  const int groups = NH / rep;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int d = int(e % hs);
    const int g = int((e / hs) % groups);
    const int64_t bt = e / hs / groups;
    const int t = int(bt % T);
    const int64_t b = bt / T;
    float acc = 0.f;
    for (int h = g * rep; h < (g + 1) * rep; ++h) acc += src[((b * NH + h) * T + t) * hs + d];
    A& to = dst[bt * W + offset + int64_t(g) * hs + d];
    st(to, ld(to) + acc);
  }
}

constexpr int kattn_threads = 128;

// One block per row i of one (batch x head): P_ij = softmax_j(scale S_ij)
// over j <= i, zero above the diagonal.
template <typename A>
__global__ void causal_softmax_k(A* att, const float* scores, float scale, int T) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x;
  const int i = int(row % T);
  const float* srow = scores + row * T;
  A* prow = att + row * T;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) mx = fmaxf(mx, scale * srow[j]);
  mx = block_reduce(mx, true, red);
  float sum = 0.f;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) sum += __expf(scale * srow[j] - mx);
  const float inv = 1.0f / block_reduce(sum, false, red);
  for (int j = threadIdx.x; j < T; j += blockDim.x)
    st(prow[j], j <= i ? __expf(scale * srow[j] - mx) * inv : 0.f);
}

// One block per row: dS_ij = scale P_ij (dP_ij - sum_k P_ik dP_ik) and the
// probabilities again, both zero above the diagonal (whatever att holds
// there).
template <typename A>
__global__ void causal_softmax_bwd_k(A* ds, A* p_clean, const float* dp, const A* att, float scale,
                                     int T) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x;
  const int i = int(row % T);
  const float* dprow = dp + row * T;
  const A* prow = att + row * T;
  float dot = 0.f;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) dot += ld(prow[j]) * dprow[j];
  dot = block_reduce(dot, false, red);
  for (int j = threadIdx.x; j < T; j += blockDim.x) {
    const float p = j <= i ? ld(prow[j]) : 0.f;
    st(ds[row * T + j], j <= i ? scale * p * (dprow[j] - dot) : 0.f);
    st(p_clean[row * T + j], p);
  }
}

// ---- cross-entropy -------------------------------------------------------

template <typename A>
__global__ void crossentropy_fwd(float* losses, float* probs, const A* logits,
                                 const int32_t* targets, int V, int valid) {
  __shared__ float red[32];
  const int n = blockIdx.x;
  const A* z = logits + int64_t(n) * V;
  float* p = probs + int64_t(n) * V;
  // One pass over the logits for the maximum and the sum of exponentials
  // (each thread's sum kept relative to its own running maximum), a second
  // for the probabilities.
  float mx = -INFINITY, sum = 0.f;
  for (int v = threadIdx.x; v < valid; v += blockDim.x) {
    const float x = ld(z[v]);
    if (x > mx) {
      sum = sum * __expf(mx - x) + 1.f;
      mx = x;
    } else {
      sum += __expf(x - mx);
    }
  }
  const float block_max = block_reduce(mx, true, red);
  sum = block_reduce(mx == -INFINITY ? 0.f : sum * __expf(mx - block_max), false, red);
  const float inv = 1.0f / sum;
  for (int v = threadIdx.x; v < V; v += blockDim.x)
    p[v] = v < valid ? __expf(ld(z[v]) - block_max) * inv : 0.f;
  // -log p[target] from the logits, accurate at tiny p.
  if (threadIdx.x == 0) losses[n] = logf(sum) - (ld(z[targets[n]]) - block_max);
}

template <typename A>
__global__ void crossentropy_bwd(A* dlogits, const float* dlosses, const float* probs,
                                 const int32_t* targets, int64_t NV, int V) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < NV;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / V;
    const int v = int(i % V);
    const float g = (probs[i] - (v == targets[n] ? 1.f : 0.f)) * dlosses[n];
    st(dlogits[i], ld(dlogits[i]) + g);
  }
}

// ---- optimizer -------------------------------------------------------------

constexpr int kmax_sq_blocks = 1024;

__global__ void sum_squares_k(double* partial, const float* x, int64_t n) {
  __shared__ double buf[kthreads];
  double s = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    s += double(x[i]) * x[i];
  buf[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {  // a fixed tree: deterministic
    if (threadIdx.x < w) buf[threadIdx.x] += buf[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = buf[0];
}

__global__ void scale_k(float* x, float f, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] *= f;
}

__global__ void adamw_k(float* w, float* g, float* m, float* v, int64_t n, float lr, float b1,
                        float b2, float eps, float wd, float c1, float c2, float gs, bool zero) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float gi = gs == 1.0f ? g[i] : g[i] * gs;
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    w[i] -= lr * (mi * c1 / (sqrtf(vi * c2) + eps) + wd * w[i]);
    if (zero) g[i] = 0.f;
  }
}

}  // namespace

int sum_squares_blocks(int64_t n) {
  return int(std::max<int64_t>(
      1, std::min<int64_t>(kmax_sq_blocks, (n + kthreads * 8 - 1) / (kthreads * 8))));
}

void sum_squares(double* partial, const float* x, int64_t n, cudaStream_t s) {
  sum_squares_k<<<sum_squares_blocks(n), kthreads, 0, s>>>(partial, x, n);
  check_launch("sum of squares");
}

void scale(float* x, float factor, int64_t n, cudaStream_t s) {
  scale_k<<<blocks_for(n), kthreads, 0, s>>>(x, factor, n);
  check_launch("scale");
}

void adamw(float* w, float* g, float* m, float* v, int64_t n, float lr, float b1, float b2,
           float eps, float wd, float c1, float c2, float grad_scale, bool zero_grad,
           cudaStream_t s) {
  adamw_k<<<blocks_for(n), kthreads, 0, s>>>(w, g, m, v, n, lr, b1, b2, eps, wd, c1, c2, grad_scale,
                                             zero_grad);
  check_launch("adamw");
}

void encoder_forward(bool bf16, void* out, const int32_t* tokens, const float* wte,
                     const float* wpe, int B, int T, int C, cudaStream_t s) {
  with_type(bf16, [&](auto a) {
    using A = decltype(a);
    const int64_t n = int64_t(B) * T * C;
    encoder_fwd<<<blocks_for(n), kthreads, 0, s>>>(static_cast<A*>(out), tokens, wte, wpe,
                                                   int64_t(B) * T, T, C);
  });
  check_launch("encoder forward");
}

void encoder_backward(bool bf16, float* dwte, float* dwpe, const void* dout, const int32_t* tokens,
                      int B, int T, int C, cudaStream_t s) {
  with_type(bf16, [&](auto a) {
    using A = decltype(a);
    const A* g = static_cast<const A*>(dout);
    encoder_bwd_wte<<<blocks_for(int64_t(B) * T * C), kthreads, 0, s>>>(dwte, g, tokens,
                                                                        int64_t(B) * T, C);
    positions_bwd<<<blocks_for(int64_t(T) * C), kthreads, 0, s>>>(dwpe, g, B, T, C);
  });
  check_launch("encoder backward");
}

void layernorm_forward(bool bf16, void* out, float* mean, float* rstd, const void* in,
                       const float* weight, const float* bias, int N, int C, cudaStream_t s) {
  with_type(bf16, [&](auto a) {
    using A = decltype(a);
    const int rows = kthreads / 32;
    layernorm_fwd<<<(N + rows - 1) / rows, kthreads, 0, s>>>(
        static_cast<A*>(out), mean, rstd, static_cast<const A*>(in), weight, bias, N, C);
  });
  check_launch("layer norm forward");
}

int64_t layernorm_partial_floats(int N, int C) {
  return 2 * int64_t(row_blocks(N)) * C;
}

void layernorm_backward(bool bf16, void* din, float* dweight, float* dbias, const void* dout,
                        const void* in, const float* weight, const float* mean, const float* rstd,
                        float* partial, int N, int C, cudaStream_t s) {
  with_type(bf16, [&](auto a) {
    using A = decltype(a);
    const A* g = static_cast<const A*>(dout);
    const A* x = static_cast<const A*>(in);
    const int rows = kthreads / 32;
    layernorm_bwd_rows<<<(N + rows - 1) / rows, kthreads, 0, s>>>(static_cast<A*>(din), g, x,
                                                                  weight, mean, rstd, N, C);
    column_sums_of(dbias, dweight, g, x, mean, rstd, partial, N, C, s);
  });
  check_launch("layer norm backward");
}

void bias_forward(bool bf16, void* out, const void* in, const float* bias, int N, int C,
                  cudaStream_t s) {
  with_type(bf16, [&](auto a) {
    using A = decltype(a);
    const int64_t n = int64_t(N) * C;
    bias_fwd<<<blocks_for(n), kthreads, 0, s>>>(static_cast<A*>(out), static_cast<const A*>(in),
                                                bias, n, C);
  });
  check_launch("bias forward");
}

int64_t column_partial_floats(int N, int C) {
  return int64_t(row_blocks(N)) * C;
}

void column_sums(bool bf16, float* dbias, const void* dout, float* partial, int N, int C,
                 cudaStream_t s) {
  with_type(bf16, [&](auto a) {
    using A = decltype(a);
    column_sums_of<A>(dbias, nullptr, static_cast<const A*>(dout), nullptr, nullptr, nullptr,
                      partial, N, C, s);
  });
  check_launch("column sums");
}

void gather_heads(bool bf16, void* dst, const void* src, int B, int T, int64_t W, int64_t offset,
                  int NH, int hs, int rep, cudaStream_t s) {
  with_type(bf16, [&](auto a) {
    using A = decltype(a);
    const int64_t n = int64_t(B) * NH * T * hs;
    gather_heads_k<<<blocks_for(n), kthreads, 0, s>>>(
        static_cast<A*>(dst), static_cast<const A*>(src), W, offset, T, NH, hs, rep, n);
  });
  check_launch("attention: gather heads");
}

void scatter_heads(bool bf16, void* out, const void* o, int B, int T, int NH, int hs,
                   cudaStream_t s) {
  with_type(bf16, [&](auto a) {
    using A = decltype(a);
    const int64_t n = int64_t(B) * NH * T * hs;
    scatter_heads_k<<<blocks_for(n), kthreads, 0, s>>>(static_cast<A*>(out),
                                                       static_cast<const A*>(o), T, NH, hs, n);
  });
  check_launch("attention: scatter heads");
}

void scatter_add_heads(bool bf16, void* dst, const float* src, int B, int T, int64_t W,
                       int64_t offset, int NH, int hs, int rep, cudaStream_t s) {
  with_type(bf16, [&](auto a) {
    using A = decltype(a);
    const int64_t n = int64_t(B) * (NH / rep) * T * hs;
    scatter_add_heads_k<<<blocks_for(n), kthreads, 0, s>>>(static_cast<A*>(dst), src, W, offset, T,
                                                           NH, hs, rep, n);
  });
  check_launch("attention: add head gradients");
}

void causal_softmax(bool bf16, void* att, const float* scores, float scale, int64_t rows, int T,
                    cudaStream_t s) {
  with_type(bf16, [&](auto a) {
    using A = decltype(a);
    causal_softmax_k<<<unsigned(rows), kattn_threads, 0, s>>>(static_cast<A*>(att), scores, scale,
                                                              T);
  });
  check_launch("attention: causal softmax");
}

void causal_softmax_backward(bool bf16, void* ds, void* p_clean, const float* dp, const void* att,
                             float scale, int64_t rows, int T, cudaStream_t s) {
  with_type(bf16, [&](auto a) {
    using A = decltype(a);
    causal_softmax_bwd_k<<<unsigned(rows), kattn_threads, 0, s>>>(
        static_cast<A*>(ds), static_cast<A*>(p_clean), dp, static_cast<const A*>(att), scale, T);
  });
  check_launch("attention: causal softmax backward");
}

void gelu_forward(bool bf16, void* out, const void* in, int64_t n, cudaStream_t s) {
  with_type(bf16, [&](auto a) {
    using A = decltype(a);
    gelu_fwd<<<blocks_for(n), kthreads, 0, s>>>(static_cast<A*>(out), static_cast<const A*>(in), n);
  });
  check_launch("gelu forward");
}

void gelu_backward(bool bf16, void* din, const void* in, const void* dout, int64_t n,
                   cudaStream_t s) {
  with_type(bf16, [&](auto a) {
    using A = decltype(a);
    gelu_bwd<<<blocks_for(n), kthreads, 0, s>>>(static_cast<A*>(din), static_cast<const A*>(in),
                                                static_cast<const A*>(dout), n);
  });
  check_launch("gelu backward");
}

void residual_forward(bool bf16, void* out, const void* a, const void* b, int64_t n,
                      cudaStream_t s) {
  with_type(bf16, [&](auto t) {
    using A = decltype(t);
    residual_fwd<<<blocks_for(n), kthreads, 0, s>>>(static_cast<A*>(out), static_cast<const A*>(a),
                                                    static_cast<const A*>(b), n);
  });
  check_launch("residual forward");
}

void residual_backward(bool bf16, void* da, void* db, const void* dout, int64_t n, cudaStream_t s) {
  with_type(bf16, [&](auto t) {
    using A = decltype(t);
    residual_bwd<<<blocks_for(n), kthreads, 0, s>>>(static_cast<A*>(da), static_cast<A*>(db),
                                                    static_cast<const A*>(dout), n);
  });
  check_launch("residual backward");
}

void convert(bool dst_bf16, void* dst, bool src_bf16, const void* src, int64_t n, bool accumulate,
             cudaStream_t s) {
  with_type(dst_bf16, [&](auto d) {
    using D = decltype(d);
    with_type(src_bf16, [&](auto x) {
      using S = decltype(x);
      convert_k<<<blocks_for(n), kthreads, 0, s>>>(static_cast<D*>(dst), static_cast<const S*>(src),
                                                   n, accumulate);
    });
  });
  check_launch("convert");
}

void crossentropy_forward(bool bf16, float* losses, float* probs, const void* logits,
                          const int32_t* targets, int N, int V, int valid, cudaStream_t s) {
  with_type(bf16, [&](auto a) {
    using A = decltype(a);
    crossentropy_fwd<<<N, kthreads, 0, s>>>(losses, probs, static_cast<const A*>(logits), targets,
                                            V, valid);
  });
  check_launch("cross-entropy forward");
}

void crossentropy_backward(bool bf16, void* dlogits, const float* dlosses, const float* probs,
                           const int32_t* targets, int N, int V, cudaStream_t s) {
  with_type(bf16, [&](auto a) {
    using A = decltype(a);
    const int64_t n = int64_t(N) * V;
    crossentropy_bwd<<<blocks_for(n), kthreads, 0, s>>>(static_cast<A*>(dlogits), dlosses, probs,
                                                        targets, n, V);
  });
  check_launch("cross-entropy backward");
}

}  // namespace merak::gpu::kernels
