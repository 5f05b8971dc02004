#include <omp.h>

#include <algorithm>
#include <cmath>

#include "model/gemm.hpp"
#include "model/kernels/kernels.hpp"
#include "model/vec_math.hpp"

namespace merak::model::kernels {
namespace {

// Query rows are processed in blocks; a block of rows [i0, i1) only attends
// to keys [0, i1), which skips most of the masked upper triangle (about 40%
// of the attention FLOPs at T = 256) while keeping GEMM-sized work.
constexpr int kBlock = 64;

}  // namespace

int64_t attention_scratch_floats(int T) {
  return int64_t(kBlock) * T;
}

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(float(hs));
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; ++bh) {
    int b = bh / NH, h = bh % NH;
    const float* q = qkv + int64_t(b) * T * C3 + h * hs;  // (T, hs), row stride 3C
    const float* k = q + C;
    const float* v = q + 2 * C;
    float* p = att + int64_t(bh) * T * T;          // (T, T)
    float* o = out + int64_t(b) * T * C + h * hs;  // (T, hs), row stride C
    for (int i0 = 0; i0 < T; i0 += kBlock) {
      int i1 = std::min(T, i0 + kBlock), M = i1 - i0, L = i1;
      // S = Q K^T / sqrt(hs) for this block of queries, keys [0, L).
      sgemm(false, true, M, L, hs, scale, q + int64_t(i0) * C3, C3, k, C3, 0.f, p + int64_t(i0) * T,
            T);
      for (int i = i0; i < i1; ++i) {
        float* row = p + int64_t(i) * T;
        float mx = -INFINITY;
        for (int j = 0; j <= i; ++j) mx = std::max(mx, row[j]);
        float sum = 0.f;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j <= i; ++j) {
          row[j] = fast_exp(row[j] - mx);
          sum += row[j];
        }
        float inv = 1.0f / sum;
#pragma omp simd
        for (int j = 0; j <= i; ++j) row[j] *= inv;
        for (int j = i + 1; j < L; ++j) row[j] = 0.f;  // causal mask
      }
      // O = P V
      sgemm(false, false, M, hs, L, 1.f, p + int64_t(i0) * T, T, v, C3, 0.f, o + int64_t(i0) * C,
            C);
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                        float* scratch, int B, int T, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(float(hs));
#pragma omp parallel
  {
    float* ds =
        scratch + int64_t(omp_get_thread_num()) * attention_scratch_floats(T);  // (kBlock, T)
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * NH; ++bh) {
      int b = bh / NH, h = bh % NH;
      int64_t base = int64_t(b) * T * C3 + h * hs;
      const float* q = qkv + base;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv + base;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* p = att + int64_t(bh) * T * T;
      const float* dO = dout + int64_t(b) * T * C + h * hs;  // (T, hs), row stride C
      for (int i0 = 0; i0 < T; i0 += kBlock) {
        int i1 = std::min(T, i0 + kBlock), M = i1 - i0, L = i1;
        const float* pb = p + int64_t(i0) * T;
        const float* dob = dO + int64_t(i0) * C;
        // dP = dO V^T ; dV += P^T dO
        sgemm(false, true, M, L, hs, 1.f, dob, C, v, C3, 0.f, ds, T);
        sgemm(true, false, L, hs, M, 1.f, pb, T, dob, C, 1.f, dv, C3);
        // dS = P * (dP - rowsum(P * dP)), zero above the diagonal.
        for (int r = 0; r < M; ++r) {
          int i = i0 + r;
          const float* prow = pb + int64_t(r) * T;
          float* drow = ds + int64_t(r) * T;
          float dot = 0.f;
#pragma omp simd reduction(+ : dot)
          for (int j = 0; j <= i; ++j) dot += prow[j] * drow[j];
#pragma omp simd
          for (int j = 0; j <= i; ++j) drow[j] = prow[j] * (drow[j] - dot);
          for (int j = i + 1; j < L; ++j) drow[j] = 0.f;
        }
        // dQ += dS K / sqrt(hs) ; dK += dS^T Q / sqrt(hs)
        sgemm(false, false, M, hs, L, scale, ds, T, k, C3, 1.f, dq + int64_t(i0) * C3, C3);
        sgemm(true, false, L, hs, M, scale, ds, T, q + int64_t(i0) * C3, C3, 1.f, dk, C3);
      }
    }
  }
}

}  // namespace merak::model::kernels
