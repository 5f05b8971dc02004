// Element-wise kernels: GELU and the residual add, over float or bf16
// storage (arithmetic in float).
//
// Loops are split into fixed chunks per thread with a plain inner loop, a
// shape GCC vectorises (it does not vectorise `parallel for simd` around
// inline math).
#include <algorithm>
#include <cmath>

#include "model/bf16.hpp"
#include "model/kernels/kernels.hpp"
#include "model/vec_math.hpp"

namespace merak::model::kernels {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
constexpr int64_t kChunk = 16384;

// Runs body(begin, end) over [0, n) in chunks spread across the threads.
template <typename Body>
void parallel_chunks(int64_t n, Body&& body) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) body(c * kChunk, std::min(n, (c + 1) * kChunk));
}

template <typename A>
void gelu_fwd(A* out, const A* inp, int64_t N) {
  parallel_chunks(N, [=](int64_t i0, int64_t i1) {
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) {
      float x = load(inp[i]);
      float u = kSqrt2OverPi * (x + kCubic * x * x * x);
      store(out[i], 0.5f * x * (1.0f + fast_tanh(u)));
    }
  });
}

template <typename A>
void gelu_bwd(A* dinp, const A* inp, const A* dout, int64_t N) {
  parallel_chunks(N, [=](int64_t i0, int64_t i1) {
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) {
      float x = load(inp[i]);
      float u = kSqrt2OverPi * (x + kCubic * x * x * x);
      float th = fast_tanh(u);
      float sech2 = 1.0f - th * th;
      float local =
          0.5f * (1.0f + th) + 0.5f * x * sech2 * kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
      store(dinp[i], load(dinp[i]) + local * load(dout[i]));
    }
  });
}

template <typename A>
void residual_fwd(A* out, const A* a, const A* b, int64_t N) {
  parallel_chunks(N, [=](int64_t i0, int64_t i1) {
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) store(out[i], load(a[i]) + load(b[i]));
  });
}

template <typename A>
void residual_bwd(A* da, A* db, const A* dout, int64_t N) {
  parallel_chunks(N, [=](int64_t i0, int64_t i1) {
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) {
      float d = load(dout[i]);
      store(da[i], load(da[i]) + d);
      store(db[i], load(db[i]) + d);
    }
  });
}

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t N) {
  gelu_fwd(out, inp, N);
}
void gelu_forward(bf16* out, const bf16* inp, int64_t N) {
  gelu_fwd(out, inp, N);
}
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t N) {
  gelu_bwd(dinp, inp, dout, N);
}
void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, int64_t N) {
  gelu_bwd(dinp, inp, dout, N);
}
void residual_forward(float* out, const float* a, const float* b, int64_t N) {
  residual_fwd(out, a, b, N);
}
void residual_forward(bf16* out, const bf16* a, const bf16* b, int64_t N) {
  residual_fwd(out, a, b, N);
}
void residual_backward(float* da, float* db, const float* dout, int64_t N) {
  residual_bwd(da, db, dout, N);
}
void residual_backward(bf16* da, bf16* db, const bf16* dout, int64_t N) {
  residual_bwd(da, db, dout, N);
}

}  // namespace merak::model::kernels
