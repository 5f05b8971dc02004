// SwiGLU (Megatron's fused form): each input row is [gate | up], the two
// halves of one fused projection; out = silu(gate) * up, arithmetic in float.
#include <cstdint>

#include "model/bf16.hpp"
#include "model/kernels/kernels.hpp"
#include "model/vec_math.hpp"

namespace merak::model::kernels {
namespace {

template <typename A>
void swiglu_fwd(A* out, const A* inp, int N, int F) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const A* gate = inp + int64_t(n) * 2 * F;  // (F)
    const A* up = gate + F;                    // (F)
    A* o = out + int64_t(n) * F;               // (F)
#pragma omp simd
    for (int f = 0; f < F; ++f) {
      const float g = load(gate[f]);
      const float sig = 1.0f / (1.0f + fast_exp(-g));
      store(o[f], g * sig * load(up[f]));
    }
  }
}

// d gate = dout * up * silu'(gate), silu'(g) = sig(g) (1 + g (1 - sig(g)));
// d up = dout * silu(gate).
template <typename A>
void swiglu_bwd(A* dinp, const A* inp, const A* dout, int N, int F) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const A* gate = inp + int64_t(n) * 2 * F;
    const A* up = gate + F;
    const A* d = dout + int64_t(n) * F;
    A* dgate = dinp + int64_t(n) * 2 * F;
    A* dup = dgate + F;
#pragma omp simd
    for (int f = 0; f < F; ++f) {
      const float g = load(gate[f]), u = load(up[f]), dy = load(d[f]);
      const float sig = 1.0f / (1.0f + fast_exp(-g));
      store(dgate[f], load(dgate[f]) + dy * u * sig * (1.0f + g * (1.0f - sig)));
      store(dup[f], load(dup[f]) + dy * g * sig);
    }
  }
}

}  // namespace

void swiglu_forward(float* out, const float* inp, int N, int F) {
  swiglu_fwd(out, inp, N, F);
}
void swiglu_forward(bf16* out, const bf16* inp, int N, int F) {
  swiglu_fwd(out, inp, N, F);
}
void swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F) {
  swiglu_bwd(dinp, inp, dout, N, F);
}
void swiglu_backward(bf16* dinp, const bf16* inp, const bf16* dout, int N, int F) {
  swiglu_bwd(dinp, inp, dout, N, F);
}

}  // namespace merak::model::kernels
