#include <omp.h>

#include <cstring>
#include <vector>

#include "model/gemm.hpp"
#include "model/kernels/kernels.hpp"

namespace merak::model::kernels {
namespace {

// Y = X W^T + b starts as the bias in every row (the GEMM then accumulates
// onto it): returns the GEMM's beta, 1 with a bias, 0 without.
float broadcast_bias(float* y, const float* bias, int N, int OC) {
  if (!bias) return 0.f;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) std::memcpy(y + int64_t(n) * OC, bias, sizeof(float) * OC);
  return 1.f;
}

}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC) {
  const float beta = broadcast_bias(out, bias, N, OC);
  sgemm(false, true, N, OC, C, 1.f, inp, C, weight, C, beta, out, OC);
}

namespace {

// Column sums of dout (N, OC) added to dbias; each thread owns a slice of
// columns (fixed order over n).
template <typename A>
void add_column_sums(float* dbias, const A* dout, int N, int OC) {
#pragma omp parallel
  {
    int nth = omp_get_num_threads(), me = omp_get_thread_num();
    int o0 = int(int64_t(OC) * me / nth), o1 = int(int64_t(OC) * (me + 1) / nth);
    for (int n = 0; n < N; ++n) {
      const A* d = dout + int64_t(n) * OC;
#pragma omp simd
      for (int o = o0; o < o1; ++o) dbias[o] += load(d[o]);
    }
  }
}

// A float buffer of at least n elements, one per thread, reused across calls.
float* scratch_floats(int64_t n) {
  static thread_local std::vector<float> buf;
  if (int64_t(buf.size()) < n) buf.resize(size_t(n));
  return buf.data();
}

}  // namespace

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC) {
  if (dinp) sgemm(false, false, N, C, OC, 1.f, dout, OC, weight, C, 1.f, dinp, C);
  if (dweight) sgemm(true, false, OC, C, N, 1.f, dout, OC, inp, C, 1.f, dweight, C);
  if (dbias) add_column_sums(dbias, dout, N, OC);
}

void matmul_forward(bf16* out, const bf16* inp, const bf16* weight, const float* bias, int N, int C,
                    int OC) {
  // The GEMM accumulates in float into a scratch buffer (bias first), then
  // rounds once into out.
  float* y = scratch_floats(int64_t(N) * OC);
  const float beta = broadcast_bias(y, bias, N, OC);
  gemm_bf16(false, true, N, OC, C, 1.f, inp, C, weight, C, beta, y, OC);
  convert(out, y, int64_t(N) * OC);
}

void matmul_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                     const bf16* weight, int N, int C, int OC) {
  if (dinp) {
    float* dx = scratch_floats(int64_t(N) * C);
    gemm_bf16(false, false, N, C, OC, 1.f, dout, OC, weight, C, 0.f, dx, C);
    accumulate(dinp, dx, int64_t(N) * C);
  }
  if (dweight) gemm_bf16(true, false, OC, C, N, 1.f, dout, OC, inp, C, 1.f, dweight, C);
  if (dbias) add_column_sums(dbias, dout, N, OC);
}

}  // namespace merak::model::kernels
