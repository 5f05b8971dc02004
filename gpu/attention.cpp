#include "gpu/attention.hpp"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "gpu/cuda_backend.hpp"
#include "gpu/cuda_util.hpp"
#include "gpu/gemm.hpp"
#include "gpu/kernels.hpp"

namespace merak::gpu {
namespace {

namespace k = kernels;

// Sizes derived from the shape: per-head copies are (B,NH,T,hs), score
// matrices (B,NH,T,T); W is the width of a qkv row.
struct attention_sizes {
  int hs, rep;
  int64_t W, heads, per_head, per_score;
  explicit attention_sizes(const attention_shape& a)
      : hs(a.C / a.NH),
        rep(a.NH / a.G),
        W(a.C + 2 * int64_t(a.G) * (a.C / a.NH)),
        heads(int64_t(a.B) * a.NH),
        per_head(int64_t(a.T) * (a.C / a.NH)),
        per_score(int64_t(a.T) * a.T) {}
  int64_t k_offset(const attention_shape& a) const { return a.C; }
  int64_t v_offset(const attention_shape& a) const { return a.C + int64_t(a.G) * hs; }
};

// Q, K and V of qkv gathered into per-head copies (K and V repeated over the
// heads of their group).
struct head_copies {
  scratch q, k, v;
  head_copies(int device, bool bf16, const void* qkv, const attention_shape& a,
              const attention_sizes& z, cudaStream_t s)
      : q(bytes(bf16, z), device), k(bytes(bf16, z), device), v(bytes(bf16, z), device) {
    k::gather_heads(bf16, q.as<void>(), qkv, a.B, a.T, z.W, 0, a.NH, z.hs, 1, s);
    k::gather_heads(bf16, k.as<void>(), qkv, a.B, a.T, z.W, z.k_offset(a), a.NH, z.hs, z.rep, s);
    k::gather_heads(bf16, v.as<void>(), qkv, a.B, a.T, z.W, z.v_offset(a), a.NH, z.hs, z.rep, s);
  }
  static size_t bytes(bool bf16, const attention_sizes& z) {
    return size_t(z.heads * z.per_head) * (bf16 ? 2 : 4);
  }
};

// scores (B NH, T, T) float = Q K^T per head, unscaled: row-major S = Q K^T
// is column-major S^T = K Q^T.
void raw_scores(int device, bool bf16, const head_copies& c, const attention_shape& a,
                const attention_sizes& z, float* scores, cudaStream_t s) {
  gemm_batched(device, bf16, false, true, false, a.T, a.T, z.hs, 1.f, c.k.as<void>(), z.hs,
               z.per_head, c.q.as<void>(), z.hs, z.per_head, 0.f, scores, a.T, z.per_score,
               int(z.heads), s);
}

// The backward from the probabilities `att` (read on and below the
// diagonal) and the per-head copies of Q, K and V.
void backward_from(int device, bool bf16, void* dqkv, const void* dout, const void* att,
                   const head_copies& c, const attention_shape& a, const attention_sizes& z,
                   cudaStream_t s);

}  // namespace

namespace {

std::atomic<bool> fused_enabled{[] {
  const char* v = std::getenv("MERAK_CUDA_FUSED_ATTENTION");
  return v && std::string_view(v) == "1";
}()};

}  // namespace

void set_fused_attention(bool on) {
  fused_enabled.store(on);
}

bool fused_attention_supported(bool bf16, const attention_shape& a) {
  return fused_enabled.load() && k::flash_attention_supported(bf16, a.C / a.NH);
}

void fused_attention_forward(bool bf16, void* out, float* lse, const void* qkv,
                             const attention_shape& a, cudaStream_t s) {
  MERAK_CHECK(fused_attention_supported(bf16, a), "fused attention: head size {}", a.C / a.NH);
  k::flash_attention_forward(out, lse, qkv, a.B, a.T, a.C, a.NH, a.G, s);
}

void fused_attention_backward(int device, bool bf16, void* dqkv, const void* dout, const void* qkv,
                              const float* lse, const attention_shape& a, cudaStream_t s) {
  const attention_sizes z(a);
  head_copies c(device, bf16, qkv, a, z, s);
  scratch scores(size_t(z.heads * z.per_score) * sizeof(float), device);
  raw_scores(device, bf16, c, a, z, scores.as<float>(), s);
  scratch p(size_t(z.heads * z.per_score) * (bf16 ? 2 : 4), device);
  k::causal_probabilities(bf16, p.as<void>(), scores.as<float>(), lse,
                          1.0f / std::sqrt(float(z.hs)), z.heads * a.T, a.T, s);
  backward_from(device, bf16, dqkv, dout, p.as<void>(), c, a, z, s);
}

void attention_forward(int device, bool bf16, void* out, void* att, const void* qkv,
                       const attention_shape& a, cudaStream_t s) {
  const attention_sizes z(a);
  const int T = a.T, hs = z.hs, batch = int(z.heads);
  head_copies c(device, bf16, qkv, a, z, s);
  scratch scores(size_t(z.heads * z.per_score) * sizeof(float), device);
  raw_scores(device, bf16, c, a, z, scores.as<float>(), s);
  k::causal_softmax(bf16, att, scores.as<float>(), 1.0f / std::sqrt(float(hs)), z.heads * T, T, s);
  // O (T,hs) = P V, column-major O^T = V^T P^T.
  scratch o(head_copies::bytes(bf16, z), device);
  gemm_batched(device, bf16, bf16, false, false, hs, T, T, 1.f, c.v.as<void>(), hs, z.per_head, att,
               T, z.per_score, 0.f, o.as<void>(), hs, z.per_head, batch, s);
  k::scatter_heads(bf16, out, o.as<void>(), a.B, T, a.NH, hs, s);
}

void attention_backward(int device, bool bf16, void* dqkv, const void* dout, const void* qkv,
                        const void* att, const attention_shape& a, cudaStream_t s) {
  const attention_sizes z(a);
  head_copies c(device, bf16, qkv, a, z, s);
  backward_from(device, bf16, dqkv, dout, att, c, a, z, s);
}

namespace {

void backward_from(int device, bool bf16, void* dqkv, const void* dout, const void* att,
                   const head_copies& c, const attention_shape& a, const attention_sizes& z,
                   cudaStream_t s) {
  const int T = a.T, hs = z.hs, batch = int(z.heads);
  const size_t score_count = size_t(z.heads * z.per_score);
  scratch g(head_copies::bytes(bf16, z), device);
  k::gather_heads(bf16, g.as<void>(), dout, a.B, T, a.C, 0, a.NH, hs, 1, s);
  // dP (T,T) = dO V^T, column-major dP^T = V dO^T.
  scratch dp(score_count * sizeof(float), device);
  gemm_batched(device, bf16, false, true, false, T, T, hs, 1.f, c.v.as<void>(), hs, z.per_head,
               g.as<void>(), hs, z.per_head, 0.f, dp.as<void>(), T, z.per_score, batch, s);
  scratch ds(score_count * (bf16 ? 2 : 4), device), p(score_count * (bf16 ? 2 : 4), device);
  k::causal_softmax_backward(bf16, ds.as<void>(), p.as<void>(), dp.as<float>(), att,
                             1.0f / std::sqrt(float(hs)), z.heads * T, T, s);
  // dQ = dS K, dK = dS^T Q, dV = P^T dO (the scale is inside dS), in float.
  const size_t grad_bytes = size_t(z.heads * z.per_head) * sizeof(float);
  scratch dq(grad_bytes, device), dk(grad_bytes, device), dv(grad_bytes, device);
  gemm_batched(device, bf16, false, false, false, hs, T, T, 1.f, c.k.as<void>(), hs, z.per_head,
               ds.as<void>(), T, z.per_score, 0.f, dq.as<void>(), hs, z.per_head, batch, s);
  gemm_batched(device, bf16, false, false, true, hs, T, T, 1.f, c.q.as<void>(), hs, z.per_head,
               ds.as<void>(), T, z.per_score, 0.f, dk.as<void>(), hs, z.per_head, batch, s);
  gemm_batched(device, bf16, false, false, true, hs, T, T, 1.f, g.as<void>(), hs, z.per_head,
               p.as<void>(), T, z.per_score, 0.f, dv.as<void>(), hs, z.per_head, batch, s);
  k::scatter_add_heads(bf16, dqkv, dq.as<float>(), a.B, T, z.W, 0, a.NH, hs, 1, s);
  k::scatter_add_heads(bf16, dqkv, dk.as<float>(), a.B, T, z.W, z.k_offset(a), a.NH, hs, z.rep, s);
  k::scatter_add_heads(bf16, dqkv, dv.as<float>(), a.B, T, z.W, z.v_offset(a), a.NH, hs, z.rep, s);
}

}  // namespace

}  // namespace merak::gpu
