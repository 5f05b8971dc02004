// The Llama family's kernels against references written from their
// published definitions: RMSNorm, rotary position embedding (Hugging Face's
// rotate-half layout), SwiGLU, and grouped-query / multi-query attention
// against multi-head attention over explicitly repeated K/V heads.
#include <catch2/catch.hpp>

#include <map>

#include <cmath>
#include <vector>

#include "model/backend.hpp"
#include "model/graph.hpp"
#include "model/layers.hpp"
#include "partition/tp_rewrite.hpp"
#include "tests/model/test_util.hpp"

using namespace merak;
using namespace merak::model;

namespace {

backend& be() {
  return backend_for(device::cpu());
}

// The largest |got - want| over all elements (float tensors).
double max_abs_diff(const tensor& got, const tensor& want) {
  REQUIRE(got.numel() == want.numel());
  double worst = 0;
  for (int64_t i = 0; i < want.numel(); ++i)
    worst = std::max(worst, std::abs(double(got.f32()[i]) - double(want.f32()[i])));
  return worst;
}

// ||got - want|| / ||want||.
double rel_err(const tensor& got, const tensor& want) {
  REQUIRE(got.numel() == want.numel());
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    double d = double(got.f32()[i]) - double(want.f32()[i]);
    num += d * d;
    den += double(want.f32()[i]) * want.f32()[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

bool bitwise_equal(const tensor& a, const tensor& b) {
  return a.bytes() == b.bytes() && std::equal(a.raw(), a.raw() + a.bytes(), b.raw());
}

// Rotate-half RoPE written from the formula, in double: for channel i < d/2
// of a head, angle = pos * theta^(-2i/d), (x_i, x_{i+d/2}) -> (x_i cos -
// x_{i+d/2} sin, x_{i+d/2} cos + x_i sin). Rows (B,T,W); the first `heads`
// heads of d channels rotated, the rest unchanged.
tensor rope_reference(const tensor& x, int heads, int d, double theta, int offset) {
  tensor y = x.clone();
  const int64_t B = x.dim(0), T = x.dim(1), W = x.dim(2);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < d / 2; ++i) {
          const double angle = double(offset + t) * std::pow(theta, -2.0 * i / d);
          const int64_t at = (b * T + t) * W + int64_t(h) * d + i;
          const double x1 = x.f32()[at], x2 = x.f32()[at + d / 2];
          y.f32()[at] = float(x1 * std::cos(angle) - x2 * std::sin(angle));
          y.f32()[at + d / 2] = float(x2 * std::cos(angle) + x1 * std::sin(angle));
        }
  return y;
}

// A grouped qkv (B,T,C+2*G*hs) widened to multi-head (B,T,3C): K/V group
// h / (NH/G) copied into head h.
tensor repeat_kv(const tensor& qkv, int C, int NH, int G) {
  const int64_t B = qkv.dim(0), T = qkv.dim(1), W = qkv.dim(2);
  const int hs = C / NH, per_group = NH / G;
  tensor out({B, T, 3 * C});
  for (int64_t r = 0; r < B * T; ++r) {
    const float* src = qkv.f32() + r * W;
    float* dst = out.f32() + r * 3 * C;
    std::copy_n(src, C, dst);
    for (int h = 0; h < NH; ++h) {
      const int grp = h / per_group;
      std::copy_n(src + C + grp * hs, hs, dst + C + h * hs);
      std::copy_n(src + C + (G + grp) * hs, hs, dst + 2 * C + h * hs);
    }
  }
  return out;
}

// The gradient of a multi-head (B,T,3C) qkv folded back onto the grouped
// layout: each group's dK and dV summed over its heads, in head order.
tensor fold_kv(const tensor& dqkv, int C, int NH, int G) {
  const int64_t B = dqkv.dim(0), T = dqkv.dim(1);
  const int hs = C / NH, per_group = NH / G, W = C + 2 * G * hs;
  tensor out = tensor::zeros({B, T, W});
  for (int64_t r = 0; r < B * T; ++r) {
    const float* src = dqkv.f32() + r * 3 * C;
    float* dst = out.f32() + r * W;
    std::copy_n(src, C, dst);
    for (int h = 0; h < NH; ++h) {
      const int grp = h / per_group;
      for (int c = 0; c < hs; ++c) {
        dst[C + grp * hs + c] += src[C + h * hs + c];
        dst[C + (G + grp) * hs + c] += src[2 * C + h * hs + c];
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("rmsnorm matches a direct reference", "[kernels]") {
  const int B = 3, T = 5, C = 40;
  const float eps = 1e-6f;
  tensor x = test::random_tensor({B, T, C}, 41, 2.0f), w = test::random_tensor({C}, 42);
  tensor y({B, T, C}), rstd({B * T});
  be().rmsnorm_forward(y, rstd, x, w, eps);
  tensor want({B, T, C});
  for (int n = 0; n < B * T; ++n) {
    double ms = 0;
    for (int c = 0; c < C; ++c) ms += double(x.f32()[n * C + c]) * x.f32()[n * C + c];
    const double r = 1.0 / std::sqrt(ms / C + eps);
    CHECK(std::abs(rstd.f32()[n] - r) <= 1e-6 * r);
    for (int c = 0; c < C; ++c) want.f32()[n * C + c] = float(x.f32()[n * C + c] * r * w.f32()[c]);
  }
  CHECK(max_abs_diff(y, want) < 1e-5);
  // No mean is subtracted: a constant row normalises to the weight's sign.
  tensor ones({1, 1, C}), one_w({C}), out({1, 1, C}), r1({1});
  for (auto& v : ones.span_f32()) v = 3.0f;
  for (auto& v : one_w.span_f32()) v = 1.0f;
  be().rmsnorm_forward(out, r1, ones, one_w, 0.0f);
  for (float v : out.span_f32()) CHECK(v == Approx(1.0f).epsilon(1e-6));
}

TEST_CASE("rotary embedding matches the published formula, offsets included", "[kernels]") {
  // qkv of 4 query heads and 2 K/V groups of 8 channels: 6 heads rotated, V
  // copied. Llama 3's base too.
  const int B = 2, T = 11, NH = 4, G = 2, hs = 8, W = (NH + 2 * G) * hs;
  tensor x = test::random_tensor({B, T, W}, 43);
  for (float theta : {10000.0f, 500000.0f})
    for (int offset : {0, 37, 4000}) {
      INFO("theta " << theta << " offset " << offset);
      tensor y({B, T, W});
      be().rope_forward(y, x, NH + G, hs, theta, offset);
      tensor want = rope_reference(x, NH + G, hs, theta, offset);
      CHECK(max_abs_diff(y, want) < 2e-5);
      // V passes through exactly.
      for (int64_t r = 0; r < B * T; ++r)
        for (int c = (NH + G) * hs; c < W; ++c) REQUIRE(y.f32()[r * W + c] == x.f32()[r * W + c]);
    }
}

TEST_CASE("rotary embedding of a sequence's tail with its offset equals the whole sequence's tail",
          "[kernels]") {
  // What a later piece of a split sequence computes must be what the whole
  // sequence computes at those positions, bit for bit.
  const int B = 2, T = 24, tail = 7, hs = 16, heads = 3, W = heads * hs;
  tensor x = test::random_tensor({B, T, W}, 44);
  tensor whole({B, T, W});
  be().rope_forward(whole, x, heads, hs, 10000.0f, 0);
  tensor x_tail({B, tail, W}), want({B, tail, W});
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < tail; ++t)
      for (int c = 0; c < W; ++c) {
        const int64_t from = (int64_t(b) * T + (T - tail + t)) * W + c, to = (b * tail + t) * W + c;
        x_tail.f32()[to] = x.f32()[from];
        want.f32()[to] = whole.f32()[from];
      }
  tensor got({B, tail, W});
  be().rope_forward(got, x_tail, heads, hs, 10000.0f, T - tail);
  CHECK(bitwise_equal(got, want));
  tensor wrong({B, tail, W});
  be().rope_forward(wrong, x_tail, heads, hs, 10000.0f, 0);
  CHECK_FALSE(bitwise_equal(wrong, want));  // the offset matters
}

TEST_CASE("rotary backward is the inverse rotation and accumulates", "[kernels]") {
  const int B = 2, T = 13, hs = 8, heads = 2, W = heads * hs + 5;
  tensor x = test::random_tensor({B, T, W}, 45), start = test::random_tensor({B, T, W}, 46);
  tensor y({B, T, W});
  be().rope_forward(y, x, heads, hs, 10000.0f, 3);
  tensor back = start.clone();
  be().rope_backward(back, y, heads, hs, 10000.0f, 3);  // start + R^T R x = start + x
  for (int64_t i = 0; i < x.numel(); ++i)
    REQUIRE(back.f32()[i] == Approx(start.f32()[i] + x.f32()[i]).margin(1e-5));
}

TEST_CASE("swiglu matches a direct reference and accumulates its gradient", "[kernels]") {
  const int N = 7, F = 33;
  tensor x = test::random_tensor({1, N, 2 * F}, 47, 3.0f), dy = test::random_tensor({1, N, F}, 48);
  tensor y({1, N, F});
  be().swiglu_forward(y, x);
  tensor want({1, N, F}), dwant = test::random_tensor({1, N, 2 * F}, 49);
  tensor dx = dwant.clone();
  for (int n = 0; n < N; ++n)
    for (int f = 0; f < F; ++f) {
      const double g = x.f32()[n * 2 * F + f], u = x.f32()[n * 2 * F + F + f];
      const double sig = 1.0 / (1.0 + std::exp(-g)), d = dy.f32()[n * F + f];
      want.f32()[n * F + f] = float(g * sig * u);
      dwant.f32()[n * 2 * F + f] += float(d * u * (sig + g * sig * (1 - sig)));
      dwant.f32()[n * 2 * F + F + f] += float(d * g * sig);
    }
  CHECK(rel_err(y, want) < 1e-6);
  be().swiglu_backward(dx, x, dy);
  CHECK(rel_err(dx, dwant) < 1e-6);
}

TEST_CASE("grouped-query attention with one group per head is the multi-head kernel, bit for bit",
          "[kernels]") {
  const int B = 2, T = 70, C = 24, NH = 3;
  tensor qkv = test::random_tensor({B, T, 3 * C}, 50), dy = test::random_tensor({B, T, C}, 51);
  tensor y0({B, T, C}), a0({B, NH, T, T}), y1({B, T, C}), a1({B, NH, T, T});
  be().attention_forward(y0, a0, qkv, NH);
  be().gqa_attention_forward(y1, a1, qkv, NH, NH);
  CHECK(bitwise_equal(y0, y1));
  tensor d0 = tensor::zeros({B, T, 3 * C}), d1 = tensor::zeros({B, T, 3 * C});
  be().attention_backward(d0, dy, qkv, a0, NH);
  be().gqa_attention_backward(d1, dy, qkv, a1, NH, NH);
  CHECK(bitwise_equal(d0, d1));
  // The layer builder makes the same node as causal_attention.
  graph g;
  int x = g.add_input("qkv", {3 * C}, dtype::f32);
  layers::grouped_query_attention(g, "attn", x, C, NH, NH, T);
  CHECK(g.nodes()[0].tp == tp_split::heads);
  CHECK(g.nodes()[0].heads == NH);
}

TEST_CASE("grouped-query and multi-query attention equal multi-head attention on repeated K/V",
          "[kernels]") {
  // T = 70 crosses a query block boundary; groups 2 (GQA) and 1 (MQA) of
  // 4 query heads.
  const int B = 2, T = 70, C = 32, NH = 4;
  for (int G : {2, 1}) {
    INFO("groups " << G);
    const int W = C + 2 * G * (C / NH);
    tensor qkv = test::random_tensor({B, T, W}, 52 + G), dy = test::random_tensor({B, T, C}, 55);
    tensor wide = repeat_kv(qkv, C, NH, G);
    tensor y({B, T, C}), att({B, NH, T, T}), y_ref({B, T, C}), att_ref({B, NH, T, T});
    be().gqa_attention_forward(y, att, qkv, NH, G);
    be().attention_forward(y_ref, att_ref, wide, NH);
    CHECK(rel_err(y, y_ref) < 1e-6);
    // Gradients accumulate onto what is already there.
    tensor start = test::random_tensor({B, T, W}, 56);
    tensor d = start.clone(), d_wide = tensor::zeros({B, T, 3 * C});
    be().gqa_attention_backward(d, dy, qkv, att, NH, G);
    be().attention_backward(d_wide, dy, wide, att_ref, NH);
    tensor d_ref = fold_kv(d_wide, C, NH, G);
    for (int64_t i = 0; i < d.numel(); ++i) d.f32()[i] -= start.f32()[i];
    CHECK(rel_err(d, d_ref) < 1e-5);
  }
}

TEST_CASE("the Llama layers refuse inconsistent shapes with a message", "[kernels]") {
  graph g;
  int x = g.add_input("qkv", {48}, dtype::f32);
  CHECK_THROWS_WITH(layers::grouped_query_attention(g, "a", x, 32, 4, 3, 8),
                    Catch::Contains("must divide heads"));
  CHECK_THROWS_WITH(layers::rotary(g, "r", x, 4, 2, 5), Catch::Contains("must be even"));
  CHECK_THROWS_WITH(layers::rmsnorm(g, "n", x, 48, 0.0f), Catch::Contains("epsilon"));
  tensor qkv({1, 2, 48}), out({1, 2, 32}), att({1, 4, 2, 2});  // 32 + 2 x 2 x 8 = 64 wanted
  CHECK_THROWS_WITH(be().gqa_attention_forward(out, att, qkv, 4, 2),
                    Catch::Contains("expects qkv (B, T, 64)"));
}

TEST_CASE("the TP rewrite splits grouped-query attention by heads and SwiGLU per half", "[tp]") {
  namespace ly = layers;
  const int C = 16, NH = 4, G = 2, hs = C / NH, F = 24;
  graph g;
  int x = g.add_input("x", {C}, dtype::f32);
  int h = ly::rmsnorm(g, "norm", x, C);
  h = ly::linear(g, "attn.qkv", h, C, C + 2 * G * hs, tp_split::column, 0.02f, false);
  h = ly::rotary(g, "attn.rope", h, NH, G, hs);
  h = ly::grouped_query_attention(g, "attn.core", h, C, NH, G, 8);
  h = ly::linear(g, "attn.proj", h, C, C, tp_split::row, 0.02f, false);
  h = ly::linear(g, "mlp.gate_up", h, C, 2 * F, tp_split::column, 0.02f, false);
  h = ly::swiglu(g, "mlp.swiglu", h, F);
  ly::linear(g, "mlp.down", h, F, C, tp_split::row, 0.02f, false);
  auto params_of = [](const graph& sg) {
    std::map<std::string, param_spec> out;
    for (auto& node : sg.nodes())
      for (auto& spec : node.params) out[spec.name] = spec;
    return out;
  };
  CHECK(partition::tp_divisibility_error(g, 2).empty());
  auto two = partition::rewrite_for_tp(g, 2, 1);
  CHECK(two.pairs == 2);
  auto p = params_of(two.graph);
  // Q: 2 of 4 heads, K and V: 1 of 2 groups each.
  CHECK(p["attn.qkv.weight"].shape == shape_t{(2 + 1 + 1) * hs, C});
  CHECK(p["attn.qkv.weight"].shard.copies() == 1);
  CHECK(p["attn.proj.weight"].shape == shape_t{C, C / 2});
  CHECK(p["mlp.gate_up.weight"].shape == shape_t{F, C});  // half of gate, half of up
  CHECK(p["mlp.gate_up.weight"].shard.groups == 2);
  CHECK(p["mlp.down.weight"].shape == shape_t{C, F / 2});
  CHECK_FALSE(p["norm.weight"].shard.sharded());
  auto four = partition::rewrite_for_tp(g, 4, 3);  // one query head, K/V group 1 replicated
  p = params_of(four.graph);
  CHECK(p["attn.qkv.weight"].shape == shape_t{(1 + 1 + 1) * hs, C});
  CHECK(p["attn.qkv.weight"].shard.copies() == 2);
  CHECK_THAT(partition::tp_divisibility_error(g, 8),
             Catch::Contains("tp 8 does not divide the 4 attention heads"));
}
