// bf16: the conversions, and every operation of the CPU backend with bf16
// activations against the same operation in float.
//
// Tolerance. Inputs are made bf16-representable and given to both runs, so
// the difference comes only from what the bf16 run rounds: its outputs (a
// relative error of at most u = 2^-8 per element, round to nearest) and,
// inside attention, the bf16 probabilities and the rounded activation before
// the second GEMM (another u each, amplified by at most the few summands
// that dominate a row). Errors are measured normwise, ||bf16 - f32|| /
// ||f32||, against 2^-6 = 4u: four roundings' worth, tight enough that a
// kernel reading the wrong element, dropping a term or rounding an
// accumulator to bf16 fails it (those give errors of order 1 or of
// sqrt(K) u).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "model/backend.hpp"
#include "model/bf16.hpp"
#include "model/gemm.hpp"
#include "tests/model/test_util.hpp"

using namespace merak;
using namespace merak::model;

namespace {

constexpr double kTol = 1.0 / 64;

backend& be() {
  return backend_for(device::cpu());
}

// A random float tensor whose values are exactly representable in bf16.
tensor representable(const shape_t& shape, uint64_t seed, float scale = 1.0f) {
  tensor t = test::random_tensor(shape, seed, scale);
  for (auto& x : t.span_f32()) x = to_f32(to_bf16(x));
  return t;
}

tensor to_bf16_tensor(const tensor& f) {
  tensor t(f.shape(), dtype::bf16);
  convert(t.bf16s(), f.f32(), f.numel());
  return t;
}

tensor zeros_like(const tensor& t) {
  return tensor::zeros(t.shape(), t.type());
}

// ||got - want|| / ||want||, got of either type.
double rel_err(const tensor& got, const tensor& want) {
  REQUIRE(got.numel() == want.numel());
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    double g = got.type() == dtype::bf16 ? to_f32(got.bf16s()[i]) : got.f32()[i];
    double w = want.f32()[i];
    num += (g - w) * (g - w);
    den += w * w;
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace

TEST_CASE("bf16 rounds to nearest even and keeps infinities and NaN", "[bf16]") {
  CHECK(to_bf16(1.0f).bits == 0x3F80);
  CHECK(to_bf16(1.0f + 0x1p-8f).bits == 0x3F80);             // a tie: to the even neighbour
  CHECK(to_bf16(1.0f + 3 * 0x1p-8f).bits == 0x3F82);         // a tie: to the even neighbour
  CHECK(to_bf16(1.0f + 0x1p-8f + 0x1p-12f).bits == 0x3F81);  // past the tie: up
  CHECK(to_bf16(-2.5f).bits == 0xC020);
  CHECK(to_bf16(std::numeric_limits<float>::infinity()).bits == 0x7F80);
  CHECK(to_bf16(std::numeric_limits<float>::max()).bits == 0x7F80);  // overflows to inf
  CHECK(std::isnan(to_f32(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(to_f32(to_bf16(std::numeric_limits<float>::signaling_NaN()))));
  CHECK(to_f32(bf16{0x3F80}) == 1.0f);
  // The bulk conversions agree with the scalar ones, across chunk edges.
  tensor f = test::random_tensor({70001}, 3, 10.0f);
  tensor b = to_bf16_tensor(f);
  tensor back(f.shape());
  convert(back.f32(), b.bf16s(), f.numel());
  for (int64_t i = 0; i < f.numel(); i += 997) {
    CHECK(b.bf16s()[i].bits == to_bf16(f.f32()[i]).bits);
    CHECK(back.f32()[i] == to_f32(to_bf16(f.f32()[i])));
  }
  CHECK(std::string(bf16_support()).size() > 0);
}

TEST_CASE("bf16 GEMM matches sgemm on the same inputs, every transpose and backend", "[bf16]") {
  // oneDNN runs bf16 kernels (or its emulation); the other backends widen
  // the inputs and run their sgemm: the path of a CPU without bf16 GEMMs.
  const int M = 37, N = 29, K = 300;
  const auto saved = current_gemm_backend();
  for (auto backend : available_gemm_backends())
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        set_gemm_backend(backend);
        tensor a = representable(ta ? shape_t{K, M} : shape_t{M, K}, 1);
        tensor b = representable(tb ? shape_t{N, K} : shape_t{K, N}, 2);
        tensor c0 = representable({M, N}, 3), c1 = c0.clone();
        sgemm(ta, tb, M, N, K, 0.5f, a.f32(), ta ? M : K, b.f32(), tb ? K : N, 1.f, c0.f32(), N);
        tensor ab = to_bf16_tensor(a), bb = to_bf16_tensor(b);
        gemm_bf16(ta, tb, M, N, K, 0.5f, ab.bf16s(), ta ? M : K, bb.bf16s(), tb ? K : N, 1.f,
                  c1.f32(), N);
        INFO(gemm_backend_name(backend) << " ta " << ta << " tb " << tb);
        // Float accumulation of exact products: only the summation order differs.
        CHECK(rel_err(c1, c0) < 1e-5);
      }
  set_gemm_backend(saved);
}

TEST_CASE("bf16 linear forward and backward match float", "[bf16]") {
  const int B = 3, T = 17, C = 48, OC = 80;
  tensor x = representable({B, T, C}, 1), w = representable({OC, C}, 2, 0.2f),
         bias = representable({OC}, 3), dy = representable({B, T, OC}, 4);
  tensor y32({B, T, OC}), y16({B, T, OC}, dtype::bf16);
  be().matmul_forward(y32, x, w, &bias);
  be().matmul_forward(y16, to_bf16_tensor(x), to_bf16_tensor(w), &bias);
  CHECK(rel_err(y16, y32) < kTol);

  tensor dx32 = tensor::zeros({B, T, C}), dw32 = tensor::zeros({OC, C}), db32 = tensor::zeros({OC});
  tensor dx16 = tensor::zeros({B, T, C}, dtype::bf16), dw16 = tensor::zeros({OC, C}),
         db16 = tensor::zeros({OC});
  be().matmul_backward(&dx32, &dw32, &db32, dy, x, w);
  be().matmul_backward(&dx16, &dw16, &db16, to_bf16_tensor(dy), to_bf16_tensor(x),
                       to_bf16_tensor(w));
  CHECK(rel_err(dx16, dx32) < kTol);
  CHECK(rel_err(dw16, dw32) < 1e-5);  // float accumulation of exact products
  CHECK(rel_err(db16, db32) < 1e-5);
  // A dtype mix is refused with the operation named.
  CHECK_THROWS_WITH(be().matmul_forward(y16, x, w, &bias), Catch::Contains("linear"));
}

TEST_CASE("bf16 attention forward and backward match float", "[bf16]") {
  // T = 80 spans two query blocks, so the causal block edges are covered.
  const int B = 2, T = 80, C = 32, NH = 4;
  tensor qkv = representable({B, T, 3 * C}, 5), dy = representable({B, T, C}, 6);
  tensor y32({B, T, C}), att32({B, NH, T, T});
  tensor y16({B, T, C}, dtype::bf16), att16({B, NH, T, T}, dtype::bf16);
  be().attention_forward(y32, att32, qkv, NH);
  be().attention_forward(y16, att16, to_bf16_tensor(qkv), NH);
  CHECK(rel_err(y16, y32) < kTol);
  tensor d32 = tensor::zeros({B, T, 3 * C}), d16 = tensor::zeros({B, T, 3 * C}, dtype::bf16);
  be().attention_backward(d32, dy, qkv, att32, NH);
  be().attention_backward(d16, to_bf16_tensor(dy), to_bf16_tensor(qkv), att16, NH);
  CHECK(rel_err(d16, d32) < kTol);
}

TEST_CASE("bf16 layer norm, GELU, residual and bias match float", "[bf16]") {
  const int B = 2, T = 9, C = 64;
  tensor x = representable({B, T, C}, 7, 3.0f), x2 = representable({B, T, C}, 8),
         w = representable({C}, 9), b = representable({C}, 10), dy = representable({B, T, C}, 11);
  tensor xb = to_bf16_tensor(x), x2b = to_bf16_tensor(x2), dyb = to_bf16_tensor(dy);

  SECTION("layer norm") {
    tensor y32({B, T, C}), m32({B * T}), r32({B * T});
    tensor y16({B, T, C}, dtype::bf16), m16({B * T}), r16({B * T});
    be().layernorm_forward(y32, m32, r32, x, w, b);
    be().layernorm_forward(y16, m16, r16, xb, w, b);
    CHECK(rel_err(y16, y32) < kTol);
    CHECK(rel_err(m16, m32) < 1e-6);  // statistics stay float
    tensor dx32 = zeros_like(x), dw32 = tensor::zeros({C}), db32 = tensor::zeros({C});
    tensor dx16 = zeros_like(xb), dw16 = tensor::zeros({C}), db16 = tensor::zeros({C});
    be().layernorm_backward(dx32, dw32, db32, dy, x, w, m32, r32);
    be().layernorm_backward(dx16, dw16, db16, dyb, xb, w, m16, r16);
    CHECK(rel_err(dx16, dx32) < kTol);
    CHECK(rel_err(dw16, dw32) < 1e-5);
    CHECK(rel_err(db16, db32) < 1e-5);
  }
  SECTION("GELU") {
    tensor y32({B, T, C}), y16({B, T, C}, dtype::bf16);
    be().gelu_forward(y32, x);
    be().gelu_forward(y16, xb);
    CHECK(rel_err(y16, y32) < kTol);
    tensor dx32 = zeros_like(x), dx16 = zeros_like(xb);
    be().gelu_backward(dx32, x, dy);
    be().gelu_backward(dx16, xb, dyb);
    CHECK(rel_err(dx16, dx32) < kTol);
  }
  SECTION("residual and bias") {
    tensor y32({B, T, C}), y16({B, T, C}, dtype::bf16);
    be().residual_forward(y32, x, x2);
    be().residual_forward(y16, xb, x2b);
    CHECK(rel_err(y16, y32) < kTol);
    tensor da32 = zeros_like(x), db32 = zeros_like(x), da16 = zeros_like(xb), db16 = zeros_like(xb);
    be().residual_backward(da32, db32, dy);
    be().residual_backward(da16, db16, dyb);
    CHECK(rel_err(da16, da32) == 0.0);  // a copy of representable values
    CHECK(rel_err(db16, db32) == 0.0);
    be().bias_forward(y32, x, b);
    be().bias_forward(y16, xb, b);
    CHECK(rel_err(y16, y32) < kTol);
    tensor g32 = tensor::zeros({C}), g16 = tensor::zeros({C});
    be().bias_backward(&da32, g32, dy);
    be().bias_backward(&da16, g16, dyb);
    CHECK(rel_err(g16, g32) < 1e-6);
    CHECK(rel_err(da16, da32) < kTol);
  }
}

TEST_CASE("bf16 embedding and cross-entropy match float", "[bf16]") {
  const int B = 2, T = 12, C = 40, V = 50;
  tensor ids = test::random_ids({B, T}, V, 12), targets = test::random_ids({B, T}, V, 13);
  tensor wte = representable({V, C}, 14), wpe = representable({T, C}, 15);
  tensor y32({B, T, C}), y16({B, T, C}, dtype::bf16);
  be().encoder_forward(y32, ids, wte, wpe);
  be().encoder_forward(y16, ids, wte, wpe);
  CHECK(rel_err(y16, y32) < kTol);
  tensor dy = representable({B, T, C}, 16);
  tensor dwte32 = zeros_like(wte), dwpe32 = zeros_like(wpe), dwte16 = zeros_like(wte),
         dwpe16 = zeros_like(wpe);
  be().encoder_backward(dwte32, dwpe32, dy, ids);
  be().encoder_backward(dwte16, dwpe16, to_bf16_tensor(dy), ids);
  CHECK(rel_err(dwte16, dwte32) < 1e-6);
  CHECK(rel_err(dwpe16, dwpe32) < 1e-6);

  tensor logits = representable({B, T, V}, 17, 2.0f);
  tensor l32({B, T}), p32({B * T, V}), l16({B, T}), p16({B * T, V});
  be().crossentropy_forward(l32, p32, logits, targets, int(logits.dim(-1)));
  be().crossentropy_forward(l16, p16, to_bf16_tensor(logits), targets, int(logits.dim(-1)));
  CHECK(rel_err(l16, l32) < 1e-6);  // the loss is float throughout
  tensor dl = representable({B, T}, 18);
  tensor dz32 = zeros_like(logits), dz16 = tensor::zeros(logits.shape(), dtype::bf16);
  be().crossentropy_backward(dz32, dl, p32, targets);
  be().crossentropy_backward(dz16, dl, p16, targets);
  CHECK(rel_err(dz16, dz32) < kTol);
}

TEST_CASE("bf16 grouped-query and multi-query attention match float", "[bf16]") {
  // T = 80 spans two query blocks; 4 query heads over 2 K/V groups, then 1.
  for (int groups : {2, 1}) {
    INFO("groups " << groups);
    const int B = 2, T = 80, C = 32, NH = 4, W = C + 2 * groups * (C / NH);
    tensor qkv = representable({B, T, W}, 21), dy = representable({B, T, C}, 22);
    tensor y32({B, T, C}), att32({B, NH, T, T});
    tensor y16({B, T, C}, dtype::bf16), att16({B, NH, T, T}, dtype::bf16);
    be().gqa_attention_forward(y32, att32, qkv, NH, groups);
    be().gqa_attention_forward(y16, att16, to_bf16_tensor(qkv), NH, groups);
    CHECK(rel_err(y16, y32) < kTol);
    tensor d32 = tensor::zeros({B, T, W}), d16 = tensor::zeros({B, T, W}, dtype::bf16);
    be().gqa_attention_backward(d32, dy, qkv, att32, NH, groups);
    be().gqa_attention_backward(d16, to_bf16_tensor(dy), to_bf16_tensor(qkv), att16, NH, groups);
    CHECK(rel_err(d16, d32) < kTol);
  }
}

TEST_CASE("bf16 rmsnorm, rotary embedding and swiglu match float", "[bf16]") {
  const int B = 2, T = 9, C = 64;
  tensor x = representable({B, T, C}, 23, 3.0f), w = representable({C}, 24),
         dy = representable({B, T, C}, 25);
  tensor xb = to_bf16_tensor(x), dyb = to_bf16_tensor(dy);

  SECTION("rmsnorm") {
    tensor y32({B, T, C}), r32({B * T});
    tensor y16({B, T, C}, dtype::bf16), r16({B * T});
    be().rmsnorm_forward(y32, r32, x, w, 1e-5f);
    be().rmsnorm_forward(y16, r16, xb, w, 1e-5f);
    CHECK(rel_err(y16, y32) < kTol);
    CHECK(rel_err(r16, r32) < 1e-6);  // statistics stay float
    tensor dx32 = zeros_like(x), dw32 = tensor::zeros({C});
    tensor dx16 = zeros_like(xb), dw16 = tensor::zeros({C});
    be().rmsnorm_backward(dx32, dw32, dy, x, w, r32);
    be().rmsnorm_backward(dx16, dw16, dyb, xb, w, r16);
    CHECK(rel_err(dx16, dx32) < kTol);
    CHECK(rel_err(dw16, dw32) < 1e-5);
  }
  SECTION("rotary embedding") {
    // 64 channels as 2 query heads, 1 K/V group of 16: 3 heads rotated.
    tensor y32({B, T, C}), y16({B, T, C}, dtype::bf16);
    be().rope_forward(y32, x, 3, 16, 10000.0f, 7);
    be().rope_forward(y16, xb, 3, 16, 10000.0f, 7);
    CHECK(rel_err(y16, y32) < kTol);
    tensor dx32 = zeros_like(x), dx16 = zeros_like(xb);
    be().rope_backward(dx32, dy, 3, 16, 10000.0f, 7);
    be().rope_backward(dx16, dyb, 3, 16, 10000.0f, 7);
    CHECK(rel_err(dx16, dx32) < kTol);
  }
  SECTION("swiglu") {
    tensor y32({B, T, C / 2}), y16({B, T, C / 2}, dtype::bf16);
    be().swiglu_forward(y32, x);
    be().swiglu_forward(y16, xb);
    CHECK(rel_err(y16, y32) < kTol);
    tensor dh = representable({B, T, C / 2}, 26);
    tensor dx32 = zeros_like(x), dx16 = zeros_like(xb);
    be().swiglu_backward(dx32, x, dh);
    be().swiglu_backward(dx16, xb, to_bf16_tensor(dh));
    CHECK(rel_err(dx16, dx32) < kTol);
  }
}
