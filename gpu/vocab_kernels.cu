// CUDA kernels of vocabulary parallelism (kernels.hpp): the embedding and
// cross-entropy of a shard holding vocabulary rows [first, first + rows),
// over the activation type A with float arithmetic, as the CPU kernels are.
#include "gpu/device_util.cuh"
#include "gpu/kernels.hpp"

namespace merak::gpu::kernels {
namespace {

template <typename A>
__global__ void embedding_shard_fwd(A* out, const int32_t* tok, const float* wte,
                                    const float* wpe, int64_t BT, int T, int C, int first,
                                    int rows) {
  const int64_t n = BT * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bt = i / C, id = int64_t(tok[bt]) - first;
    const int c = int(i % C);
    float v = id >= 0 && id < rows ? wte[id * C + c] : 0.f;
    if (wpe) v += wpe[(bt % T) * C + c];
    st(out[i], v);
  }
}

template <typename A>
__global__ void embedding_shard_bwd(float* dwte, const A* dout, const int32_t* tok, int64_t BT,
                                    int C, int first, int rows) {
  const int64_t n = BT * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t id = int64_t(tok[i / C]) - first;
    if (id >= 0 && id < rows) atomicAdd(&dwte[id * C + i % C], ld(dout[i]));
  }
}

// One block per row: the log-sum-exp of the counted columns (a running
// maximum per thread, as crossentropy_fwd) and the target's logit.
template <typename A>
__global__ void vocab_stats(float* stats, const A* logits, const int32_t* targets, int Vs,
                            int first, int counted, int part, int parts) {
  __shared__ float red[32];
  const int n = blockIdx.x;
  const A* z = logits + int64_t(n) * Vs;
  float mx = -INFINITY, sum = 0.f;
  for (int v = threadIdx.x; v < counted; v += blockDim.x) {
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
  float* s = stats + int64_t(n) * 2 * parts;
  for (int k = threadIdx.x; k < 2 * parts; k += blockDim.x) s[k] = 0.f;
  __syncthreads();
  if (threadIdx.x == 0) {
    s[2 * part] = counted > 0 ? block_max + logf(sum) : -INFINITY;
    const int64_t t = int64_t(targets[n]) - first;
    s[2 * part + 1] = t >= 0 && t < counted ? ld(z[t]) : 0.f;
  }
}

__device__ float total_lse(const float* s, int parts) {
  float mx = -INFINITY;
  for (int k = 0; k < parts; ++k) mx = fmaxf(mx, s[2 * k]);
  float sum = 0.f;
  for (int k = 0; k < parts; ++k) sum += expf(s[2 * k] - mx);
  return mx + logf(sum);
}

__global__ void vocab_loss(float* losses, const float* stats, int N, int parts) {
  for (int n = blockIdx.x * blockDim.x + threadIdx.x; n < N; n += gridDim.x * blockDim.x) {
    const float* s = stats + int64_t(n) * 2 * parts;
    float target = 0.f;
    for (int k = 0; k < parts; ++k) target += s[2 * k + 1];
    losses[n] = total_lse(s, parts) - target;
  }
}

template <typename A>
__global__ void vocab_bwd(A* dlogits, const float* dlosses, const A* logits, const float* stats,
                          const int32_t* targets, int64_t NV, int Vs, int first, int counted,
                          int parts) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < NV;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / Vs;
    const int v = int(i % Vs);
    if (v >= counted) continue;
    const float lse = total_lse(stats + n * 2 * parts, parts);
    const float g = (__expf(ld(logits[i]) - lse) - (v == targets[n] - first ? 1.f : 0.f)) *
                    dlosses[n];
    st(dlogits[i], ld(dlogits[i]) + g);
  }
}

int counted_columns(int Vs, int first, int valid) {
  return std::max(0, std::min(Vs, valid - first));
}

}  // namespace

void embedding_shard_forward(bool bf16, void* out, const int32_t* tokens, const float* wte,
                             const float* wpe, int B, int T, int C, int first, int rows,
                             cudaStream_t s) {
  with_type(bf16, [&](auto a) {
    using A = decltype(a);
    const int64_t n = int64_t(B) * T * C;
    embedding_shard_fwd<<<blocks_for(n), kthreads, 0, s>>>(static_cast<A*>(out), tokens, wte, wpe,
                                                           int64_t(B) * T, T, C, first, rows);
  });
  check_launch("vocabulary-parallel embedding forward");
}

void embedding_shard_backward(bool bf16, float* dwte, float* dwpe, const void* dout,
                              const int32_t* tokens, int B, int T, int C, int first, int rows,
                              cudaStream_t s) {
  with_type(bf16, [&](auto a) {
    using A = decltype(a);
    const A* g = static_cast<const A*>(dout);
    embedding_shard_bwd<<<blocks_for(int64_t(B) * T * C), kthreads, 0, s>>>(
        dwte, g, tokens, int64_t(B) * T, C, first, rows);
    if (dwpe) positions_bwd<<<blocks_for(int64_t(T) * C), kthreads, 0, s>>>(dwpe, g, B, T, C);
  });
  check_launch("vocabulary-parallel embedding backward");
}

void vocab_ce_stats(bool bf16, float* stats, const void* logits, const int32_t* targets, int N,
                    int Vs, int first, int valid, int part, int parts, cudaStream_t s) {
  with_type(bf16, [&](auto a) {
    using A = decltype(a);
    vocab_stats<<<N, kthreads, 0, s>>>(stats, static_cast<const A*>(logits), targets, Vs, first,
                                       counted_columns(Vs, first, valid), part, parts);
  });
  check_launch("vocabulary-parallel cross-entropy statistics");
}

void vocab_ce_loss(float* losses, const float* stats, int N, int parts, cudaStream_t s) {
  vocab_loss<<<blocks_for(N), kthreads, 0, s>>>(losses, stats, N, parts);
  check_launch("vocabulary-parallel cross-entropy loss");
}

void vocab_ce_backward(bool bf16, void* dlogits, const float* dlosses, const void* logits,
                       const float* stats, const int32_t* targets, int N, int Vs, int first,
                       int valid, int parts, cudaStream_t s) {
  with_type(bf16, [&](auto a) {
    using A = decltype(a);
    const int64_t n = int64_t(N) * Vs;
    vocab_bwd<<<blocks_for(n), kthreads, 0, s>>>(static_cast<A*>(dlogits), dlosses,
                                                  static_cast<const A*>(logits), stats, targets, n,
                                                  Vs, first, counted_columns(Vs, first, valid),
                                                  parts);
  });
  check_launch("vocabulary-parallel cross-entropy backward");
}

}  // namespace merak::gpu::kernels
