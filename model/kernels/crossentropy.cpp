#include <cmath>

#include "model/bf16.hpp"
#include "model/kernels/kernels.hpp"
#include "model/vec_math.hpp"

namespace merak::model::kernels {
namespace {

template <typename A>
void crossentropy_fwd(float* losses, float* probs, const A* logits, const int32_t* targets, int N,
                      int V, int valid) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const A* z = logits + int64_t(n) * V;  // (V)
    float* p = probs + int64_t(n) * V;     // (V)
    float mx = -INFINITY;
    for (int v = 0; v < valid; ++v) mx = std::max(mx, load(z[v]));
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int v = 0; v < valid; ++v) {
      p[v] = fast_exp(load(z[v]) - mx);
      sum += p[v];
    }
    float inv = 1.0f / sum;
#pragma omp simd
    for (int v = 0; v < valid; ++v) p[v] *= inv;
    for (int v = valid; v < V; ++v) p[v] = 0.f;
    // -log p[target] computed from the logits for accuracy at tiny p.
    losses[n] = std::log(sum) - (load(z[targets[n]]) - mx);
  }
}

template <typename A>
void crossentropy_bwd(A* dlogits, const float* dlosses, const float* probs, const int32_t* targets,
                      int N, int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    A* dz = dlogits + int64_t(n) * V;
    const float* p = probs + int64_t(n) * V;
    float dl = dlosses[n];
#pragma omp simd
    for (int v = 0; v < V; ++v) store(dz[v], load(dz[v]) + p[v] * dl);
    store(dz[targets[n]], load(dz[targets[n]]) - dl);
  }
}

}  // namespace

void crossentropy_forward(float* losses, float* probs, const float* logits, const int32_t* targets,
                          int N, int V, int valid) {
  crossentropy_fwd(losses, probs, logits, targets, N, V, valid < 0 ? V : valid);
}
void crossentropy_forward(float* losses, float* probs, const bf16* logits, const int32_t* targets,
                          int N, int V, int valid) {
  crossentropy_fwd(losses, probs, logits, targets, N, V, valid < 0 ? V : valid);
}
void crossentropy_backward(float* dlogits, const float* dlosses, const float* probs,
                           const int32_t* targets, int N, int V) {
  crossentropy_bwd(dlogits, dlosses, probs, targets, N, V);
}
void crossentropy_backward(bf16* dlogits, const float* dlosses, const float* probs,
                           const int32_t* targets, int N, int V) {
  crossentropy_bwd(dlogits, dlosses, probs, targets, N, V);
}

}  // namespace merak::model::kernels
