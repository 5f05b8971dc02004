#include <omp.h>

#include <cmath>
#include <vector>

#include "model/bf16.hpp"
#include "model/kernels/kernels.hpp"

namespace merak::model::kernels {
namespace {

template <typename A>
void layernorm_fwd(A* out, float* mean, float* rstd, const A* inp, const float* weight,
                   const float* bias, int N, int C) {
  constexpr float eps = 1e-5f;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const A* x = inp + int64_t(n) * C;  // (C)
    A* o = out + int64_t(n) * C;        // (C)
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; ++c) s += load(x[c]);
    float m = s / C;
    float v = 0.f;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; ++c) v += (load(x[c]) - m) * (load(x[c]) - m);
    float r = 1.0f / std::sqrt(v / C + eps);
#pragma omp simd
    for (int c = 0; c < C; ++c) store(o[c], (load(x[c]) - m) * r * weight[c] + bias[c]);
    mean[n] = m;
    rstd[n] = r;
  }
}

template <typename A>
void layernorm_bwd(A* dinp, float* dweight, float* dbias, const A* dout, const A* inp,
                   const float* weight, const float* mean, const float* rstd, int N, int C) {
  // dweight/dbias are sums over rows: the rows are cut into a fixed number
  // of blocks, each summed into its own partial, and the partials added in
  // block order, so the result does not depend on how many threads the
  // runtime actually gives the team (OMP_THREAD_LIMIT, nested regions):
  // each thread takes every team-size-th block.
  const int nth = omp_get_max_threads();
  std::vector<float> partial(size_t(nth) * 2 * C, 0.f);
#pragma omp parallel num_threads(nth)
  for (int blk = omp_get_thread_num(); blk < nth; blk += omp_get_num_threads()) {
    float* pw = partial.data() + size_t(blk) * 2 * C;
    float* pb = pw + C;
    int n0 = int(int64_t(N) * blk / nth), n1 = int(int64_t(N) * (blk + 1) / nth);
    for (int n = n0; n < n1; ++n) {
      const A* x = inp + int64_t(n) * C;
      const A* d = dout + int64_t(n) * C;
      A* dx = dinp + int64_t(n) * C;
      float m = mean[n], r = rstd[n];
      float dnorm_mean = 0.f, dnorm_norm_mean = 0.f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
      for (int c = 0; c < C; ++c) {
        float xhat = (load(x[c]) - m) * r;
        float dn = weight[c] * load(d[c]);
        dnorm_mean += dn;
        dnorm_norm_mean += dn * xhat;
      }
      dnorm_mean /= C;
      dnorm_norm_mean /= C;
#pragma omp simd
      for (int c = 0; c < C; ++c) {
        float xhat = (load(x[c]) - m) * r;
        float g = load(d[c]);
        pb[c] += g;
        pw[c] += xhat * g;
        float dn = weight[c] * g;
        store(dx[c], load(dx[c]) + (dn - dnorm_mean - xhat * dnorm_norm_mean) * r);
      }
    }
  }
  for (int t = 0; t < nth; ++t) {
    const float* pw = partial.data() + size_t(t) * 2 * C;
    const float* pb = pw + C;
#pragma omp simd
    for (int c = 0; c < C; ++c) {
      dweight[c] += pw[c];
      dbias[c] += pb[c];
    }
  }
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C) {
  layernorm_fwd(out, mean, rstd, inp, weight, bias, N, C);
}
void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const float* weight,
                       const float* bias, int N, int C) {
  layernorm_fwd(out, mean, rstd, inp, weight, bias, N, C);
}
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C) {
  layernorm_bwd(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
  layernorm_bwd(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

}  // namespace merak::model::kernels
