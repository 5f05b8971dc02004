// Fused causal attention forward (FlashAttention-2's scheme): per block 64
// query rows of one (batch, head), four warps of 16 rows each; key and value
// tiles of 64 rows pass through shared memory, scores and the running
// softmax stay in registers (bf16 tensor-core MMA, m16n8k16, float
// accumulation), and only the output and each row's log-sum-exp reach
// device memory. See kernels.hpp.
#include <cuda_bf16.h>

#include "gpu/device_util.cuh"
#include "gpu/kernels.hpp"

namespace merak::gpu::kernels {
namespace {

constexpr int kbr = 64;  // query rows per block
constexpr int kbc = 64;  // keys per tile
constexpr int kpad = 8;  // bf16 elements of padding per shared row (bank spread)

// D = C x B + D for one 16x8 tile: A 16x16 (row), B 16x8 (column), bf16,
// float accumulators, in the register layout of PTX's mma.m16n8k16.
__device__ __forceinline__ void mma_16816(float* d, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ uint32_t pack(bf lo, bf hi) {
  __nv_bfloat162 v;
  v.x = lo;
  v.y = hi;
  return *reinterpret_cast<uint32_t*>(&v);
}

// Two consecutive bf16 of shared memory as one register.
__device__ __forceinline__ uint32_t pair(const bf* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// Copies `rows` rows of D bf16 from global rows `stride` elements apart into
// shared rows of D + kpad; rows past `valid` are zero. 16-byte copies.
template <int D>
__device__ __forceinline__ void load_tile(bf* dst, const bf* src, int64_t stride, int rows,
                                          int valid) {
  constexpr int vecs = D / 8;  // 16-byte vectors per row
  for (int e = threadIdx.x; e < rows * vecs; e += blockDim.x) {
    const int r = e / vecs, c = (e % vecs) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < valid) v = *reinterpret_cast<const uint4*>(src + int64_t(r) * stride + c);
    *reinterpret_cast<uint4*>(dst + r * (D + kpad) + c) = v;
  }
}

// One key tile of the running softmax for this thread's two rows row[0],
// row[1]: scales and causally masks the scores s, folds them into the
// running maximum m and sum l, turns them into probabilities and rescales
// the output accumulators o by how far the maximum moved.
template <int D>
__device__ __forceinline__ void online_softmax(float (&s)[kbc / 8][4], float (&o)[D / 8][4],
                                               float (&m)[2], float (&l)[2], const int (&row)[2],
                                               int k0, int T, float scale, int tig) {
  // Scale, causal mask, and the running maximum of each of the two rows.
  float tile_max[2] = {-1e30f, -1e30f};
#pragma unroll
  for (int nt = 0; nt < kbc / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = k0 + nt * 8 + tig * 2 + (e & 1), r = e >> 1;
      const float v = key <= row[r] && key < T ? s[nt][e] * scale : -1e30f;
      s[nt][e] = v;
      tile_max[r] = fmaxf(tile_max[r], v);
    }
  float alpha[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
    const float m_new = fmaxf(m[r], tile_max[r]);
    alpha[r] = __expf(m[r] - m_new);
    m[r] = m_new;
    l[r] *= alpha[r];
  }
  float tile_sum[2] = {0.f, 0.f};
#pragma unroll
  for (int nt = 0; nt < kbc / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e >> 1;
      const float p = s[nt][e] <= -1e29f ? 0.f : __expf(s[nt][e] - m[r]);
      s[nt][e] = p;
      tile_sum[r] += p;
    }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    tile_sum[r] += __shfl_xor_sync(0xffffffffu, tile_sum[r], 1);
    tile_sum[r] += __shfl_xor_sync(0xffffffffu, tile_sum[r], 2);
    l[r] += tile_sum[r];
  }
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) {
    o[dt][0] *= alpha[0];
    o[dt][1] *= alpha[0];
    o[dt][2] *= alpha[1];
    o[dt][3] *= alpha[1];
  }
}

// This thread's two output rows (row[0], row[1] of head h, batch b)
// normalised by their sums, and their log-sum-exp.
template <int D>
__device__ __forceinline__ void store_rows(bf* out, float* lse, const float (&o)[D / 8][4],
                                           const float (&m)[2], const float (&l)[2],
                                           const int (&row)[2], int b, int h, int bh, int T, int C,
                                           int tig) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r] >= T) continue;
    const float inv = 1.0f / l[r];
    bf* orow = out + (int64_t(b) * T + row[r]) * C + int64_t(h) * D;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      const int c = dt * 8 + tig * 2;
      *reinterpret_cast<uint32_t*>(orow + c) = pack(o[dt][2 * r] * inv, o[dt][2 * r + 1] * inv);
    }
    if (tig == 0) lse[int64_t(bh) * T + row[r]] = m[r] + logf(l[r]);
  }
}

// grid (ceil(T / 64), B * NH), 128 threads. qkv (B,T,W) bf16 with Q at
// column h D, K at C + g D and V at C + (G + g) D, g = h / rep.
template <int D>
__global__ void __launch_bounds__(128)
    flash_fwd(bf* out, float* lse, const bf* qkv, int T, int C, int NH, int G, float scale) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf* sq = reinterpret_cast<bf*>(smem_raw);
  bf* sk = sq + kbr * (D + kpad);
  bf* sv = sk + kbc * (D + kpad);
  const int qt = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH, g = h / (NH / G);
  const int64_t W = int64_t(C) + 2 * int64_t(G) * D;
  const bf* base = qkv + int64_t(b) * T * W;
  const int q0 = qt * kbr;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;

  load_tile<D>(sq, base + int64_t(q0) * W + int64_t(h) * D, W, kbr, T - q0);
  __syncthreads();
  // This warp's 16 query rows as A fragments, D / 16 of them.
  uint32_t qa[D / 16][4];
  const bf* qw = sq + (warp * 16) * (D + kpad);
#pragma unroll
  for (int kc = 0; kc < D / 16; ++kc) {
    const int c = kc * 16 + tig * 2;
    qa[kc][0] = pair(qw + gid * (D + kpad) + c);
    qa[kc][1] = pair(qw + (gid + 8) * (D + kpad) + c);
    qa[kc][2] = pair(qw + gid * (D + kpad) + c + 8);
    qa[kc][3] = pair(qw + (gid + 8) * (D + kpad) + c + 8);
  }

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m[2] = {-1e30f, -1e30f}, l[2] = {0.f, 0.f};
  const int row[2] = {q0 + warp * 16 + gid, q0 + warp * 16 + gid + 8};
  const int last_key = min(T, q0 + kbr) - 1;

  for (int k0 = 0; k0 <= last_key; k0 += kbc) {
    __syncthreads();  // the previous tile is no longer read
    load_tile<D>(sk, base + int64_t(k0) * W + C + int64_t(g) * D, W, kbc, T - k0);
    load_tile<D>(sv, base + int64_t(k0) * W + C + int64_t(G + g) * D, W, kbc, T - k0);
    __syncthreads();

    float s[kbc / 8][4];
#pragma unroll
    for (int nt = 0; nt < kbc / 8; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
      const bf* krow = sk + (nt * 8 + gid) * (D + kpad);
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc) {
        const uint32_t kb[2] = {pair(krow + kc * 16 + tig * 2), pair(krow + kc * 16 + tig * 2 + 8)};
        mma_16816(s[nt], qa[kc], kb);
      }
    }
    online_softmax<D>(s, o, m, l, row, k0, T, scale, tig);
    // O += P V: P's accumulators of key tiles 2kk and 2kk+1 are the A
    // fragment of keys 16kk .. 16kk+15.
#pragma unroll
    for (int kk = 0; kk < kbc / 16; ++kk) {
      const uint32_t pa[4] = {pack(s[2 * kk][0], s[2 * kk][1]), pack(s[2 * kk][2], s[2 * kk][3]),
                              pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
      const bf* v0 = sv + (kk * 16 + tig * 2) * (D + kpad);
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        const int c = dt * 8 + gid;
        const uint32_t vb[2] = {pack(v0[c], v0[(D + kpad) + c]),
                                pack(v0[8 * (D + kpad) + c], v0[9 * (D + kpad) + c])};
        mma_16816(o[dt], pa, vb);
      }
    }
  }

  store_rows<D>(out, lse, o, m, l, row, b, h, bh, T, C, tig);
}

template <int D>
void launch_flash(bf* out, float* lse, const bf* qkv, int B, int T, int C, int NH, int G,
                  cudaStream_t s) {
  const size_t smem = size_t(kbr + 2 * kbc) * (D + kpad) * sizeof(bf);
  // Above the default 48 KiB at D = 128; set on the current device every time.
  check_cuda(
      cudaFuncSetAttribute(flash_fwd<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
      "fused attention: shared memory limit");
  dim3 grid((T + kbr - 1) / kbr, unsigned(B) * NH);
  flash_fwd<D><<<grid, 128, smem, s>>>(out, lse, qkv, T, C, NH, G, 1.0f / sqrtf(float(D)));
}

// P (rows of T) = exp(scale S - lse) on and below the diagonal, 0 above.
template <typename A>
__global__ void probabilities_k(A* p, const float* scores, const float* lse, float scale, int T,
                                int64_t n) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = e / T;
    const int j = int(e % T), i = int(row % T);
    st(p[e], j <= i ? __expf(scale * scores[e] - lse[row]) : 0.f);
  }
}

}  // namespace

bool flash_attention_supported(bool bf16, int head_size) {
  return bf16 && (head_size == 64 || head_size == 128);
}

void flash_attention_forward(void* out, float* lse, const void* qkv, int B, int T, int C, int NH,
                             int G, cudaStream_t s) {
  const int hs = C / NH;
  MERAK_CHECK(flash_attention_supported(true, hs) && G > 0 && NH % G == 0,
              "fused attention: head size {} with {} groups of {} heads", hs, G, NH);
  if (hs == 64)
    launch_flash<64>(static_cast<bf*>(out), lse, static_cast<const bf*>(qkv), B, T, C, NH, G, s);
  else
    launch_flash<128>(static_cast<bf*>(out), lse, static_cast<const bf*>(qkv), B, T, C, NH, G, s);
  check_launch("fused attention forward");
}

void causal_probabilities(bool bf16, void* p, const float* scores, const float* lse, float scale,
                          int64_t rows, int T, cudaStream_t s) {
  with_type(bf16, [&](auto a) {
    using A = decltype(a);
    const int64_t n = rows * T;
    probabilities_k<<<blocks_for(n), kthreads, 0, s>>>(static_cast<A*>(p), scores, lse, scale, T,
                                                       n);
  });
  check_launch("attention: probabilities from the log-sum-exp");
}

}  // namespace merak::gpu::kernels
