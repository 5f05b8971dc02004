// Element-wise kernels: GELU and the residual add.
#include <cmath>

#include "model/kernels/kernels.hpp"
#include "model/vec_math.hpp"

namespace merak::model::kernels {
namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
}  // namespace

void gelu_forward(float* out, const float* inp, int64_t N) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    float x = inp[i];
    float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    out[i] = 0.5f * x * (1.0f + fast_tanh(u));
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t N) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    float x = inp[i];
    float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    float th = fast_tanh(u);
    float sech2 = 1.0f - th * th;
    float local = 0.5f * (1.0f + th) + 0.5f * x * sech2 * kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    dinp[i] += local * dout[i];
  }
}

void residual_forward(float* out, const float* a, const float* b, int64_t N) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < N; ++i) out[i] = a[i] + b[i];
}

void residual_backward(float* da, float* db, const float* dout, int64_t N) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

}  // namespace merak::model::kernels
