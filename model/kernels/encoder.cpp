#include <omp.h>

#include <cstring>

#include "model/bf16.hpp"
#include "model/kernels/kernels.hpp"

namespace merak::model::kernels {
namespace {

template <typename A>
void encoder_fwd(A* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T,
                 int C) {
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < int64_t(B) * T; ++bt) {
    int t = int(bt % T);
    A* o = out + bt * C;                             // (C)
    const float* e = wte + int64_t(tokens[bt]) * C;  // (C)
    const float* p = wpe + int64_t(t) * C;           // (C)
#pragma omp simd
    for (int c = 0; c < C; ++c) store(o[c], e[c] + p[c]);
  }
}

template <typename A>
void encoder_bwd(float* dwte, float* dwpe, const A* dout, const int32_t* tokens, int B, int T,
                 int C) {
  // Each thread owns a slice of channels, so the scatter into dwte has no
  // races and the summation order per element is fixed (b, t ascending).
#pragma omp parallel
  {
    int nth = omp_get_num_threads(), me = omp_get_thread_num();
    int c0 = int(int64_t(C) * me / nth), c1 = int(int64_t(C) * (me + 1) / nth);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        const A* d = dout + (int64_t(b) * T + t) * C;
        float* we = dwte + int64_t(tokens[int64_t(b) * T + t]) * C;
        float* wp = dwpe + int64_t(t) * C;
#pragma omp simd
        for (int c = c0; c < c1; ++c) {
          float g = load(d[c]);
          we[c] += g;
          wp[c] += g;
        }
      }
  }
}

}  // namespace

void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                     int T, int C) {
  encoder_fwd(out, tokens, wte, wpe, B, T, C);
}
void encoder_forward(bf16* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                     int T, int C) {
  encoder_fwd(out, tokens, wte, wpe, B, T, C);
}
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                      int T, int C, int) {
  encoder_bwd(dwte, dwpe, dout, tokens, B, T, C);
}
void encoder_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens, int B,
                      int T, int C, int) {
  encoder_bwd(dwte, dwpe, dout, tokens, B, T, C);
}

}  // namespace merak::model::kernels
