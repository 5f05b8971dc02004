// Vocabulary-parallel embedding and cross-entropy (kernels.hpp states the
// contracts): a shard holds a contiguous range of the vocabulary's rows.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "model/bf16.hpp"
#include "model/kernels/kernels.hpp"
#include "model/vec_math.hpp"

namespace merak::model::kernels {
namespace {

template <typename A>
void embedding_shard_fwd(A* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int B, int T, int C, int first, int rows) {
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < int64_t(B) * T; ++bt) {
    const int64_t id = int64_t(tokens[bt]) - first;
    const bool held = id >= 0 && id < rows;
    const float* e = wte + (held ? id : 0) * C;
    const float* p = wpe ? wpe + (bt % T) * C : nullptr;
    A* o = out + bt * C;
    for (int c = 0; c < C; ++c) store(o[c], (held ? e[c] : 0.f) + (p ? p[c] : 0.f));
  }
}

template <typename A>
void embedding_shard_bwd(float* dwte, float* dwpe, const A* dout, const int32_t* tokens, int B,
                         int T, int C, int first, int rows) {
  // Channels split over the threads: no races, the order per element fixed.
#pragma omp parallel
  {
    const int nth = omp_get_num_threads(), me = omp_get_thread_num();
    const int c0 = int(int64_t(C) * me / nth), c1 = int(int64_t(C) * (me + 1) / nth);
    for (int64_t bt = 0; bt < int64_t(B) * T; ++bt) {
      const A* d = dout + bt * C;
      const int64_t id = int64_t(tokens[bt]) - first;
      if (id >= 0 && id < rows) {
        float* we = dwte + id * C;
        for (int c = c0; c < c1; ++c) we[c] += load(d[c]);
      }
      if (dwpe) {
        float* wp = dwpe + (bt % T) * C;
        for (int c = c0; c < c1; ++c) wp[c] += load(d[c]);
      }
    }
  }
}

template <typename A>
void vocab_stats(float* stats, const A* logits, const int32_t* targets, int N, int Vs, int first,
                 int valid, int part, int parts) {
  const int counted = std::max(0, std::min(Vs, valid - first));  // columns below `valid`
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const A* z = logits + int64_t(n) * Vs;
    float* s = stats + int64_t(n) * 2 * parts;
    for (int k = 0; k < 2 * parts; ++k) s[k] = 0.f;
    float mx = -INFINITY;
    for (int v = 0; v < counted; ++v) mx = std::max(mx, load(z[v]));
    float sum = 0.f;
    for (int v = 0; v < counted; ++v) sum += fast_exp(load(z[v]) - mx);
    s[2 * part] = counted > 0 ? mx + std::log(sum) : -INFINITY;
    const int64_t t = int64_t(targets[n]) - first;
    s[2 * part + 1] = t >= 0 && t < counted ? load(z[t]) : 0.f;
  }
}

// log sum_k exp(lse_k) of row n's stats.
float total_lse(const float* s, int parts) {
  float mx = -INFINITY;
  for (int k = 0; k < parts; ++k) mx = std::max(mx, s[2 * k]);
  float sum = 0.f;
  for (int k = 0; k < parts; ++k) sum += std::exp(s[2 * k] - mx);
  return mx + std::log(sum);
}

template <typename A>
void vocab_bwd(A* dlogits, const float* dlosses, const A* logits, const float* stats,
               const int32_t* targets, int N, int Vs, int first, int valid, int parts) {
  const int counted = std::max(0, std::min(Vs, valid - first));
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const A* z = logits + int64_t(n) * Vs;
    A* dz = dlogits + int64_t(n) * Vs;
    const float lse = total_lse(stats + int64_t(n) * 2 * parts, parts), dl = dlosses[n];
    for (int v = 0; v < counted; ++v) store(dz[v], load(dz[v]) + fast_exp(load(z[v]) - lse) * dl);
    const int64_t t = int64_t(targets[n]) - first;
    if (t >= 0 && t < counted) store(dz[t], load(dz[t]) - dl);
  }
}

}  // namespace

#define MERAK_VOCAB_KERNELS(A)                                                                  \
  void embedding_shard_forward(A* out, const int32_t* tokens, const float* wte,                \
                               const float* wpe, int B, int T, int C, int first, int rows) {   \
    embedding_shard_fwd(out, tokens, wte, wpe, B, T, C, first, rows);                          \
  }                                                                                            \
  void embedding_shard_backward(float* dwte, float* dwpe, const A* dout, const int32_t* tokens, \
                                int B, int T, int C, int first, int rows) {                    \
    embedding_shard_bwd(dwte, dwpe, dout, tokens, B, T, C, first, rows);                       \
  }                                                                                            \
  void vocab_ce_stats(float* stats, const A* logits, const int32_t* targets, int N, int Vs,    \
                      int first, int valid, int part, int parts) {                             \
    vocab_stats(stats, logits, targets, N, Vs, first, valid, part, parts);                     \
  }                                                                                            \
  void vocab_ce_backward(A* dlogits, const float* dlosses, const A* logits, const float* stats, \
                         const int32_t* targets, int N, int Vs, int first, int valid,          \
                         int parts) {                                                          \
    vocab_bwd(dlogits, dlosses, logits, stats, targets, N, Vs, first, valid, parts);           \
  }
MERAK_VOCAB_KERNELS(float)
MERAK_VOCAB_KERNELS(bf16)
#undef MERAK_VOCAB_KERNELS

void vocab_ce_loss(float* losses, const float* stats, int N, int parts) {
  for (int n = 0; n < N; ++n) {
    const float* s = stats + int64_t(n) * 2 * parts;
    float target = 0.f;
    for (int k = 0; k < parts; ++k) target += s[2 * k + 1];
    losses[n] = total_lse(s, parts) - target;
  }
}

}  // namespace merak::model::kernels
