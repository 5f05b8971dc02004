// Rotary position embedding, Hugging Face's rotate-half layout: channel i
// of a head (i < hs/2) is paired with channel i + hs/2 and the pair is
// rotated by the angle pos * theta^(-2i/hs). Angles are formed in double
// (accurate at large positions) and their cosines and sines rounded to
// float; the rotation itself runs in float.
#include <cmath>
#include <vector>

#include "model/bf16.hpp"
#include "model/kernels/kernels.hpp"

namespace merak::model::kernels {
namespace {

// cos and sin of every (position, frequency): (T, hs/2) each.
struct rotation_table {
  std::vector<float> cos, sin;
  rotation_table(int T, int hs, float theta, int pos_offset) {
    const int half = hs / 2;
    cos.resize(size_t(T) * half);
    sin.resize(size_t(T) * half);
    for (int i = 0; i < half; ++i) {
      const double inv_freq = std::pow(double(theta), -2.0 * i / hs);
      for (int t = 0; t < T; ++t) {
        const double angle = double(int64_t(pos_offset) + t) * inv_freq;
        cos[size_t(t) * half + i] = float(std::cos(angle));
        sin[size_t(t) * half + i] = float(std::sin(angle));
      }
    }
  }
};

template <typename A>
void rope_fwd(A* out, const A* inp, int B, int T, int CR, int RH, int hs, float theta,
              int pos_offset) {
  const rotation_table tab(T, hs, theta, pos_offset);
  const int half = hs / 2;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < int64_t(B) * T; ++n) {
    const float* c = tab.cos.data() + (n % T) * half;  // (hs/2)
    const float* s = tab.sin.data() + (n % T) * half;
    const A* x = inp + n * CR;  // (CR)
    A* y = out + n * CR;
    for (int h = 0; h < RH; ++h) {
      const A* xh = x + h * hs;
      A* yh = y + h * hs;
#pragma omp simd
      for (int i = 0; i < half; ++i) {
        const float x1 = load(xh[i]), x2 = load(xh[i + half]);
        store(yh[i], x1 * c[i] - x2 * s[i]);
        store(yh[i + half], x2 * c[i] + x1 * s[i]);
      }
    }
    if (y != x)
      for (int ch = RH * hs; ch < CR; ++ch) y[ch] = x[ch];
  }
}

// The transpose of the rotation (the rotation by -angle), accumulated.
template <typename A>
void rope_bwd(A* dinp, const A* dout, int B, int T, int CR, int RH, int hs, float theta,
              int pos_offset) {
  const rotation_table tab(T, hs, theta, pos_offset);
  const int half = hs / 2;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < int64_t(B) * T; ++n) {
    const float* c = tab.cos.data() + (n % T) * half;
    const float* s = tab.sin.data() + (n % T) * half;
    const A* d = dout + n * CR;
    A* dx = dinp + n * CR;
    for (int h = 0; h < RH; ++h) {
      const A* dh = d + h * hs;
      A* dxh = dx + h * hs;
#pragma omp simd
      for (int i = 0; i < half; ++i) {
        const float d1 = load(dh[i]), d2 = load(dh[i + half]);
        store(dxh[i], load(dxh[i]) + d1 * c[i] + d2 * s[i]);
        store(dxh[i + half], load(dxh[i + half]) + d2 * c[i] - d1 * s[i]);
      }
    }
    for (int ch = RH * hs; ch < CR; ++ch) store(dx[ch], load(dx[ch]) + load(d[ch]));
  }
}

}  // namespace

void rope_forward(float* out, const float* inp, int B, int T, int CR, int RH, int hs, float theta,
                  int pos_offset) {
  rope_fwd(out, inp, B, T, CR, RH, hs, theta, pos_offset);
}
void rope_forward(bf16* out, const bf16* inp, int B, int T, int CR, int RH, int hs, float theta,
                  int pos_offset) {
  rope_fwd(out, inp, B, T, CR, RH, hs, theta, pos_offset);
}
void rope_backward(float* dinp, const float* dout, int B, int T, int CR, int RH, int hs,
                   float theta, int pos_offset) {
  rope_bwd(dinp, dout, B, T, CR, RH, hs, theta, pos_offset);
}
void rope_backward(bf16* dinp, const bf16* dout, int B, int T, int CR, int RH, int hs, float theta,
                   int pos_offset) {
  rope_bwd(dinp, dout, B, T, CR, RH, hs, theta, pos_offset);
}

}  // namespace merak::model::kernels
