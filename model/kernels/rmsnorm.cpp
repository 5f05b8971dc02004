// RMSNorm (Llama / Megatron): out = inp / sqrt(mean(inp^2) + eps) * weight,
// no mean subtraction and no bias; statistics in float.
#include <omp.h>

#include <cmath>
#include <vector>

#include "model/bf16.hpp"
#include "model/kernels/kernels.hpp"

namespace merak::model::kernels {
namespace {

template <typename A>
void rmsnorm_fwd(A* out, float* rstd, const A* inp, const float* weight, int N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const A* x = inp + int64_t(n) * C;  // (C)
    A* o = out + int64_t(n) * C;        // (C)
    float ss = 0.f;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; ++c) ss += load(x[c]) * load(x[c]);
    float r = 1.0f / std::sqrt(ss / C + eps);
#pragma omp simd
    for (int c = 0; c < C; ++c) store(o[c], load(x[c]) * r * weight[c]);
    rstd[n] = r;
  }
}

// With xhat = x * r and dn = weight * dout:
// dx = r * (dn - xhat * mean(dn * xhat)), dweight = sum over rows of dout * xhat.
template <typename A>
void rmsnorm_bwd(A* dinp, float* dweight, const A* dout, const A* inp, const float* weight,
                 const float* rstd, int N, int C) {
  // dweight is summed per block of rows, a fixed number of blocks added in
  // block order: the result does not depend on the team size the runtime
  // grants (as in layernorm_backward).
  const int nth = omp_get_max_threads();
  std::vector<float> partial(size_t(nth) * C, 0.f);
#pragma omp parallel num_threads(nth)
  for (int blk = omp_get_thread_num(); blk < nth; blk += omp_get_num_threads()) {
    float* pw = partial.data() + size_t(blk) * C;
    int n0 = int(int64_t(N) * blk / nth), n1 = int(int64_t(N) * (blk + 1) / nth);
    for (int n = n0; n < n1; ++n) {
      const A* x = inp + int64_t(n) * C;
      const A* d = dout + int64_t(n) * C;
      A* dx = dinp + int64_t(n) * C;
      const float r = rstd[n];
      float dnorm_norm_mean = 0.f;
#pragma omp simd reduction(+ : dnorm_norm_mean)
      for (int c = 0; c < C; ++c) dnorm_norm_mean += weight[c] * load(d[c]) * load(x[c]) * r;
      dnorm_norm_mean /= C;
#pragma omp simd
      for (int c = 0; c < C; ++c) {
        float xhat = load(x[c]) * r;
        float g = load(d[c]);
        pw[c] += xhat * g;
        store(dx[c], load(dx[c]) + (weight[c] * g - xhat * dnorm_norm_mean) * r);
      }
    }
  }
  for (int t = 0; t < nth; ++t) {
    const float* pw = partial.data() + size_t(t) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) dweight[c] += pw[c];
  }
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     float eps) {
  rmsnorm_fwd(out, rstd, inp, weight, N, C, eps);
}
void rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const float* weight, int N, int C,
                     float eps) {
  rmsnorm_fwd(out, rstd, inp, weight, N, C, eps);
}
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int C) {
  rmsnorm_bwd(dinp, dweight, dout, inp, weight, rstd, N, C);
}
void rmsnorm_backward(bf16* dinp, float* dweight, const bf16* dout, const bf16* inp,
                      const float* weight, const float* rstd, int N, int C) {
  rmsnorm_bwd(dinp, dweight, dout, inp, weight, rstd, N, C);
}

}  // namespace merak::model::kernels
