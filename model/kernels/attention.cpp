#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/gemm.hpp"
#include "model/kernels/kernels.hpp"
#include "model/vec_math.hpp"

namespace merak::model::kernels {
namespace {

// Query rows are processed in blocks; a block of rows [i0, i1) only attends
// to keys [0, i1), which skips most of the masked upper triangle (about 40%
// of the attention FLOPs at T = 256) while keeping GEMM-sized work.
constexpr int kBlock = 64;

// Keys a query row i reads in its block: [0, row_span(i)).
int row_span(int i, int T) {
  return std::min(T, (i / kBlock + 1) * kBlock);
}

// One (batch, head) forward: q, k, v (T, hs) with row stride ld; o (T, hs)
// with row stride ldo; p (T, T) the probabilities (zero between the
// diagonal and the end of each row's block).
void head_forward(float* o, int ldo, float* p, const float* q, const float* k, const float* v,
                  int ld, int T, int hs, float scale) {
  for (int i0 = 0; i0 < T; i0 += kBlock) {
    int i1 = std::min(T, i0 + kBlock), M = i1 - i0, L = i1;
    // S = Q K^T / sqrt(hs) for this block of queries, keys [0, L).
    sgemm(false, true, M, L, hs, scale, q + int64_t(i0) * ld, ld, k, ld, 0.f, p + int64_t(i0) * T,
          T);
    for (int i = i0; i < i1; ++i) {
      float* row = p + int64_t(i) * T;
      float mx = -INFINITY;
      for (int j = 0; j <= i; ++j) mx = std::max(mx, row[j]);
      float sum = 0.f;
#pragma omp simd reduction(+ : sum)
      for (int j = 0; j <= i; ++j) {
        row[j] = fast_exp(row[j] - mx);
        sum += row[j];
      }
      float inv = 1.0f / sum;
#pragma omp simd
      for (int j = 0; j <= i; ++j) row[j] *= inv;
      for (int j = i + 1; j < L; ++j) row[j] = 0.f;  // causal mask
    }
    // O = P V
    sgemm(false, false, M, hs, L, 1.f, p + int64_t(i0) * T, T, v, ld, 0.f, o + int64_t(i0) * ldo,
          ldo);
  }
}

// One (batch, head) backward: adds into dq, dk, dv (row stride ldd); dO
// (T, hs) with row stride ldo; ds a (kBlock, T) scratch block.
void head_backward(float* dq, float* dk, float* dv, int ldd, float* ds, const float* dO, int ldo,
                   const float* q, const float* k, const float* v, int ld, const float* p, int T,
                   int hs, float scale) {
  for (int i0 = 0; i0 < T; i0 += kBlock) {
    int i1 = std::min(T, i0 + kBlock), M = i1 - i0, L = i1;
    const float* pb = p + int64_t(i0) * T;
    const float* dob = dO + int64_t(i0) * ldo;
    // dP = dO V^T ; dV += P^T dO
    sgemm(false, true, M, L, hs, 1.f, dob, ldo, v, ld, 0.f, ds, T);
    sgemm(true, false, L, hs, M, 1.f, pb, T, dob, ldo, 1.f, dv, ldd);
    // dS = P * (dP - rowsum(P * dP)), zero above the diagonal.
    for (int r = 0; r < M; ++r) {
      int i = i0 + r;
      const float* prow = pb + int64_t(r) * T;
      float* drow = ds + int64_t(r) * T;
      float dot = 0.f;
#pragma omp simd reduction(+ : dot)
      for (int j = 0; j <= i; ++j) dot += prow[j] * drow[j];
#pragma omp simd
      for (int j = 0; j <= i; ++j) drow[j] = prow[j] * (drow[j] - dot);
      for (int j = i + 1; j < L; ++j) drow[j] = 0.f;
    }
    // dQ += dS K / sqrt(hs) ; dK += dS^T Q / sqrt(hs)
    sgemm(false, false, M, hs, L, scale, ds, T, k, ld, 1.f, dq + int64_t(i0) * ldd, ldd);
    sgemm(true, false, L, hs, M, scale, ds, T, q + int64_t(i0) * ld, ld, 1.f, dk, ldd);
  }
}

// Per-thread float buffers of the bf16 path, reused across calls.
struct head_buffers {
  std::vector<float> q, k, v, o, p, dq, dk, dv, ds;
  void size_for(int T, int hs) {
    size_t th = size_t(T) * size_t(hs), tt = size_t(T) * size_t(T);
    for (auto* b : {&q, &k, &v, &o, &dq, &dk, &dv})
      if (b->size() < th) b->resize(th);
    if (p.size() < tt) p.resize(tt);
    if (ds.size() < size_t(kBlock) * size_t(T)) ds.resize(size_t(kBlock) * size_t(T));
  }
};

head_buffers& buffers(int T, int hs) {
  static thread_local head_buffers b;
  b.size_for(T, hs);
  return b;
}

// (T, hs) rows of a bf16 tensor with row stride ld, widened (row stride hs).
void gather(float* dst, const bf16* src, int ld, int T, int hs) {
  for (int t = 0; t < T; ++t)
    for (int d = 0; d < hs; ++d) dst[int64_t(t) * hs + d] = to_f32(src[int64_t(t) * ld + d]);
}

// dst (T, hs) with row stride ld += src (T, hs), rounded back to bf16.
void scatter_add(bf16* dst, int ld, const float* src, int T, int hs) {
  for (int t = 0; t < T; ++t)
    for (int d = 0; d < hs; ++d) {
      bf16& x = dst[int64_t(t) * ld + d];
      x = to_bf16(to_f32(x) + src[size_t(t) * hs + d]);
    }
}

// The layout of a grouped qkv row: [Q (NH heads) | K (G heads) | V (G heads)],
// heads of hs channels; query head h reads K/V group h / (NH / G).
struct qkv_layout {
  int NH, G, hs, C, ld;  // C = NH * hs output channels; ld the qkv row stride
  int heads_per_group() const { return NH / G; }
  int64_t q(int h) const { return int64_t(h) * hs; }
  int64_t k(int grp) const { return C + int64_t(grp) * hs; }
  int64_t v(int grp) const { return C + int64_t(G + grp) * hs; }
};

qkv_layout layout_of(int C, int NH, int G) {
  const int hs = C / NH;
  return {NH, G, hs, C, C + 2 * G * hs};
}

}  // namespace

int64_t attention_scratch_floats(int T) {
  return int64_t(kBlock) * T;
}

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                       int G) {
  const qkv_layout lay = layout_of(C, NH, G);
  const float scale = 1.0f / std::sqrt(float(lay.hs));
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; ++bh) {
    int b = bh / NH, h = bh % NH, grp = h / lay.heads_per_group();
    const float* row = qkv + int64_t(b) * T * lay.ld;  // (T, ld)
    head_forward(out + int64_t(b) * T * C + lay.q(h), C, att + int64_t(bh) * T * T, row + lay.q(h),
                 row + lay.k(grp), row + lay.v(grp), lay.ld, T, lay.hs, scale);
  }
}

// Parallel over (batch, group): the heads of a group add into the same dK
// and dV, one after the other, so the sums are race-free and deterministic.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                        float* scratch, int B, int T, int C, int NH, int G) {
  const qkv_layout lay = layout_of(C, NH, G);
  const float scale = 1.0f / std::sqrt(float(lay.hs));
  const int per_group = lay.heads_per_group();
#pragma omp parallel
  {
    float* ds =
        scratch + int64_t(omp_get_thread_num()) * attention_scratch_floats(T);  // (kBlock, T)
#pragma omp for schedule(static)
    for (int bg = 0; bg < B * G; ++bg) {
      int b = bg / G, grp = bg % G;
      const int64_t base = int64_t(b) * T * lay.ld;
      const float* row = qkv + base;
      float* drow = dqkv + base;
      for (int h = grp * per_group; h < (grp + 1) * per_group; ++h)
        head_backward(drow + lay.q(h), drow + lay.k(grp), drow + lay.v(grp), lay.ld, ds,
                      dout + int64_t(b) * T * C + lay.q(h), C, row + lay.q(h), row + lay.k(grp),
                      row + lay.v(grp), lay.ld, att + (int64_t(b) * NH + h) * T * T, T, lay.hs,
                      scale);
    }
  }
}

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  attention_forward(out, att, qkv, B, T, C, NH, NH);
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                        float* scratch, int B, int T, int C, int NH) {
  attention_backward(dqkv, dout, qkv, att, scratch, B, T, C, NH, NH);
}

// bf16: each (batch, head) is widened into per-thread float buffers, runs
// the float code above, and is rounded back; the probabilities are kept in
// bf16 (the entries each row's block reads).
void attention_forward(bf16* out, bf16* att, const bf16* qkv, int B, int T, int C, int NH, int G) {
  const qkv_layout lay = layout_of(C, NH, G);
  const int hs = lay.hs;
  const float scale = 1.0f / std::sqrt(float(hs));
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; ++bh) {
    int b = bh / NH, h = bh % NH, grp = h / lay.heads_per_group();
    auto& w = buffers(T, hs);
    const bf16* row = qkv + int64_t(b) * T * lay.ld;
    gather(w.q.data(), row + lay.q(h), lay.ld, T, hs);
    gather(w.k.data(), row + lay.k(grp), lay.ld, T, hs);
    gather(w.v.data(), row + lay.v(grp), lay.ld, T, hs);
    head_forward(w.o.data(), hs, w.p.data(), w.q.data(), w.k.data(), w.v.data(), hs, T, hs, scale);
    bf16* o = out + int64_t(b) * T * C + lay.q(h);
    for (int t = 0; t < T; ++t)
      for (int d = 0; d < hs; ++d) o[int64_t(t) * C + d] = to_bf16(w.o[size_t(t) * hs + d]);
    bf16* a = att + int64_t(bh) * T * T;
    for (int i = 0; i < T; ++i)
      for (int j = 0, L = row_span(i, T); j < L; ++j)
        a[int64_t(i) * T + j] = to_bf16(w.p[size_t(i) * T + j]);
  }
}

// Parallel over (batch, group) as the float backward; a group's dK and dV
// are summed in float over its heads and rounded into dqkv once.
void attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* att, int B,
                        int T, int C, int NH, int G) {
  const qkv_layout lay = layout_of(C, NH, G);
  const int hs = lay.hs, per_group = lay.heads_per_group();
  const float scale = 1.0f / std::sqrt(float(hs));
  const size_t th = size_t(T) * hs;
#pragma omp parallel for schedule(static)
  for (int bg = 0; bg < B * G; ++bg) {
    int b = bg / G, grp = bg % G;
    auto& w = buffers(T, hs);
    const int64_t base = int64_t(b) * T * lay.ld;
    const bf16* row = qkv + base;
    bf16* drow = dqkv + base;
    gather(w.k.data(), row + lay.k(grp), lay.ld, T, hs);
    gather(w.v.data(), row + lay.v(grp), lay.ld, T, hs);
    std::fill_n(w.dk.data(), th, 0.f);
    std::fill_n(w.dv.data(), th, 0.f);
    for (int h = grp * per_group; h < (grp + 1) * per_group; ++h) {
      gather(w.q.data(), row + lay.q(h), lay.ld, T, hs);
      gather(w.o.data(), dout + int64_t(b) * T * C + lay.q(h), C, T, hs);  // dO
      const bf16* a = att + (int64_t(b) * NH + h) * T * T;
      for (int i = 0; i < T; ++i)
        for (int j = 0, L = row_span(i, T); j < L; ++j)
          w.p[size_t(i) * T + j] = to_f32(a[int64_t(i) * T + j]);
      std::fill_n(w.dq.data(), th, 0.f);
      head_backward(w.dq.data(), w.dk.data(), w.dv.data(), hs, w.ds.data(), w.o.data(), hs,
                    w.q.data(), w.k.data(), w.v.data(), hs, w.p.data(), T, hs, scale);
      scatter_add(drow + lay.q(h), lay.ld, w.dq.data(), T, hs);
    }
    scatter_add(drow + lay.k(grp), lay.ld, w.dk.data(), T, hs);
    scatter_add(drow + lay.v(grp), lay.ld, w.dv.data(), T, hs);
  }
}

void attention_forward(bf16* out, bf16* att, const bf16* qkv, int B, int T, int C, int NH) {
  attention_forward(out, att, qkv, B, T, C, NH, NH);
}

void attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* att, int B,
                        int T, int C, int NH) {
  attention_backward(dqkv, dout, qkv, att, B, T, C, NH, NH);
}

}  // namespace merak::model::kernels
