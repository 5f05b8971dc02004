#include <cmath>

#include "model/kernels/kernels.hpp"
#include "model/vec_math.hpp"

namespace merak::model::kernels {

void crossentropy_forward(float* losses, float* probs, const float* logits, const int32_t* targets,
                          int N, int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* z = logits + int64_t(n) * V;  // (V)
    float* p = probs + int64_t(n) * V;         // (V)
    float mx = -INFINITY;
    for (int v = 0; v < V; ++v) mx = std::max(mx, z[v]);
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int v = 0; v < V; ++v) {
      p[v] = fast_exp(z[v] - mx);
      sum += p[v];
    }
    float inv = 1.0f / sum;
#pragma omp simd
    for (int v = 0; v < V; ++v) p[v] *= inv;
    // -log p[target] computed from the logits for accuracy at tiny p.
    losses[n] = std::log(sum) - (z[targets[n]] - mx);
  }
}

void crossentropy_backward(float* dlogits, const float* dlosses, const float* probs,
                           const int32_t* targets, int N, int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    float* dz = dlogits + int64_t(n) * V;
    const float* p = probs + int64_t(n) * V;
    float dl = dlosses[n];
#pragma omp simd
    for (int v = 0; v < V; ++v) dz[v] += p[v] * dl;
    dz[targets[n]] -= dl;
  }
}

}  // namespace merak::model::kernels
