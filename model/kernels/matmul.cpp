#include <omp.h>

#include <cstring>

#include "model/gemm.hpp"
#include "model/kernels/kernels.hpp"

namespace merak::model::kernels {

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC) {
  // Y = X W^T + b: broadcast the bias into Y, then accumulate the GEMM onto it.
  float beta = 0.f;
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) std::memcpy(out + int64_t(n) * OC, bias, sizeof(float) * OC);
    beta = 1.f;
  }
  sgemm(false, true, N, OC, C, 1.f, inp, C, weight, C, beta, out, OC);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC) {
  if (dinp) sgemm(false, false, N, C, OC, 1.f, dout, OC, weight, C, 1.f, dinp, C);
  sgemm(true, false, OC, C, N, 1.f, dout, OC, inp, C, 1.f, dweight, C);
  if (dbias) {
    // Column sums; each thread owns a slice of columns (fixed order over n).
#pragma omp parallel
    {
      int nth = omp_get_num_threads(), me = omp_get_thread_num();
      int o0 = int(int64_t(OC) * me / nth), o1 = int(int64_t(OC) * (me + 1) / nth);
      for (int n = 0; n < N; ++n) {
        const float* d = dout + int64_t(n) * OC;
#pragma omp simd
        for (int o = o0; o < o1; ++o) dbias[o] += d[o];
      }
    }
  }
}

}  // namespace merak::model::kernels
