// Finite-difference checks of every layer's backward and of the whole model.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/rng.hpp"
#include "model/executor.hpp"
#include "model/gpt.hpp"
#include "model/layers.hpp"
#include "tests/model/test_util.hpp"

using namespace merak;
using namespace merak::model;

namespace {

struct tolerance {
  double h = 1e-2, atol = 1e-3, rtol = 1e-2;
};

// Checks layer `node` of `g` (its inputs are graph inputs given in `inputs`):
// the objective sum(out * R) for a random R, differentiated numerically with
// respect to sampled entries of every f32 input and every parameter.
void check_node(const graph& g, int node, std::vector<tensor>& inputs, tolerance tol = {}) {
  parameter_store store(11);
  std::vector<parameter_ptr> params;
  for (auto& spec : g.nodes()[node].params) {
    params.push_back(store.get_or_create(spec));
    // Random values rather than the (often constant) initialisation.
    auto r = test::random_tensor(spec.shape, 100 + params.size(), 0.5f);
    if (spec.init == init_kind::ones)
      for (auto& x : r.span_f32()) x += 1.0f;
    params.back()->value = std::move(r);
  }
  auto l = g.nodes()[node].make(params);
  std::vector<const tensor*> in;
  std::vector<shape_t> shapes;
  for (auto& t : inputs) {
    in.push_back(&t);
    shapes.push_back(t.shape());
  }
  tensor out(l->output_shape(shapes));
  auto R = test::random_tensor(out.shape(), 77);
  auto objective = [&] {
    stash st;
    tensor o(out.shape());
    l->forward(in, o, st);
    double f = 0;
    for (int64_t i = 0; i < o.numel(); ++i) f += double(o.f32()[i]) * R.f32()[i];
    return f;
  };
  stash st;
  l->forward(in, out, st);
  std::vector<tensor> din;
  std::vector<tensor*> din_ptr;
  for (auto& t : inputs) {
    din.push_back(t.type() == dtype::f32 ? tensor::zeros(t.shape()) : tensor());
    din_ptr.push_back(t.type() == dtype::f32 ? &din.back() : nullptr);
  }
  for (size_t i = 0; i < din.size(); ++i)
    din_ptr[i] = inputs[i].type() == dtype::f32 ? &din[i] : nullptr;
  l->backward(in, R, din_ptr, st);

  rng pick(5, 6);
  auto check_entries = [&](tensor& value, const tensor& grad, const std::string& what) {
    int n = int(std::min<int64_t>(24, value.numel()));
    for (int s = 0; s < n; ++s) {
      int64_t i = value.numel() <= 24 ? s : int64_t(pick.below(value.numel()));
      float saved = value.f32()[i];
      value.f32()[i] = saved + float(tol.h);
      double fp = objective();
      value.f32()[i] = saved - float(tol.h);
      double fm = objective();
      value.f32()[i] = saved;
      double numeric = (fp - fm) / (2 * tol.h);
      double analytic = grad.f32()[i];
      INFO(g.nodes()[node].kind << " d/d" << what << "[" << i << "]: analytic " << analytic
                                << " numeric " << numeric);
      CHECK(std::abs(analytic - numeric) <=
            tol.atol + tol.rtol * std::max(std::abs(analytic), std::abs(numeric)));
    }
  };
  for (size_t k = 0; k < inputs.size(); ++k)
    if (inputs[k].type() == dtype::f32)
      check_entries(inputs[k], din[k], "input" + std::to_string(k));
  for (auto& p : params) check_entries(p->value, p->grad, p->spec.name);
}

// Central differences of the mean loss against the executor's gradient at
// `per_param` random entries of every parameter of g, the normal-initialised
// ones scaled up so every path carries gradient.
void check_model_gradients(const graph& g, int V, int T, uint64_t seed, int per_param = 4) {
  parameter_store store(seed);
  executor ex(g, store);
  for (auto& p : store.all())
    if (p->spec.init == init_kind::normal)
      p->value = test::random_tensor(p->spec.shape, p->value.numel(), 0.3f);
  auto tokens = test::random_ids({2, T}, V, seed + 1);
  auto targets = test::random_ids({2, T}, V, seed + 2);
  auto inputs = [&] {
    std::vector<tensor> v;
    v.push_back(tokens.clone());
    v.push_back(targets.clone());
    return v;
  };
  store.zero_grads();
  ex.forward(0, inputs());
  ex.backward(0, {});
  rng pick(seed, 5);
  const double step = 2e-3;
  int checked = 0;
  for (auto& p : store.all()) {
    for (int s = 0; s < per_param; ++s) {
      int64_t i = int64_t(pick.below(p->value.numel()));
      float saved = p->value.f32()[i];
      p->value.f32()[i] = saved + float(step);
      double fp = ex.evaluate(inputs());
      p->value.f32()[i] = saved - float(step);
      double fm = ex.evaluate(inputs());
      p->value.f32()[i] = saved;
      double numeric = (fp - fm) / (2 * step);
      double analytic = p->grad.f32()[i];
      INFO(p->spec.name << "[" << i << "]: analytic " << analytic << " numeric " << numeric);
      CHECK(std::abs(analytic - numeric) <= 2e-4 + 3e-2 * std::abs(numeric));
      ++checked;
    }
  }
  CHECK(checked == int(store.all().size()) * per_param);
}

}  // namespace

TEST_CASE("embedding gradients match finite differences", "[grad]") {
  graph g;
  int ids = g.add_input("tokens", {}, dtype::i32);
  layers::embedding(g, "embed", ids, 13, 9, 6);
  std::vector<tensor> in;
  in.push_back(test::random_ids({2, 7}, 13, 1));
  in.front().data<int32_t>()[3] = in.front().data<int32_t>()[9];  // a repeated token accumulates
  check_node(g, 0, in);
}

TEST_CASE("layernorm gradients match finite differences", "[grad]") {
  graph g;
  int x = g.add_input("x", {10}, dtype::f32);
  layers::layernorm(g, "ln", x, 10);
  std::vector<tensor> in;
  in.push_back(test::random_tensor({2, 3, 10}, 2));
  check_node(g, 0, in, {1e-2, 2e-3, 2e-2});
}

TEST_CASE("linear gradients match finite differences", "[grad]") {
  graph g;
  int x = g.add_input("x", {7}, dtype::f32);
  layers::linear(g, "fc", x, 7, 5, tp_split::column);
  std::vector<tensor> in;
  in.push_back(test::random_tensor({2, 3, 7}, 3));
  check_node(g, 0, in);
}

TEST_CASE("causal attention gradients match finite differences", "[grad]") {
  // T = 67 crosses a query block boundary.
  graph g;
  int x = g.add_input("qkv", {24}, dtype::f32);
  layers::causal_attention(g, "attn", x, 8, 2, 67);
  std::vector<tensor> in;
  in.push_back(test::random_tensor({2, 67, 24}, 4));
  check_node(g, 0, in, {1e-2, 2e-3, 2e-2});
}

TEST_CASE("gelu gradients match finite differences", "[grad]") {
  graph g;
  int x = g.add_input("x", {9}, dtype::f32);
  layers::gelu(g, "gelu", x, 9);
  std::vector<tensor> in;
  in.push_back(test::random_tensor({2, 3, 9}, 5, 2.0f));
  check_node(g, 0, in);
}

TEST_CASE("residual gradients match finite differences", "[grad]") {
  graph g;
  int a = g.add_input("a", {4}, dtype::f32);
  int b = g.add_input("b", {4}, dtype::f32);
  layers::residual(g, "res", a, b, 4);
  std::vector<tensor> in;
  in.push_back(test::random_tensor({2, 3, 4}, 6));
  in.push_back(test::random_tensor({2, 3, 4}, 7));
  check_node(g, 0, in);
}

TEST_CASE("cross-entropy gradients match finite differences", "[grad]") {
  graph g;
  int z = g.add_input("logits", {11}, dtype::f32);
  int t = g.add_input("targets", {}, dtype::i32);
  layers::cross_entropy(g, "loss", z, t, 11);
  std::vector<tensor> in;
  in.push_back(test::random_tensor({2, 3, 11}, 8, 2.0f));
  in.push_back(test::random_ids({2, 3}, 11, 9));
  check_node(g, 0, in);
}

TEST_CASE("tied LM head gradients match finite differences", "[grad]") {
  graph g;
  int x = g.add_input("x", {6}, dtype::f32);
  layers::lm_head(g, "lm_head", x, 6, 13, "wte");
  std::vector<tensor> in;
  in.push_back(test::random_tensor({2, 3, 6}, 10));
  check_node(g, 0, in);
}

TEST_CASE("bias-free linear gradients match finite differences", "[grad]") {
  graph g;
  int x = g.add_input("x", {7}, dtype::f32);
  layers::linear(g, "fc", x, 7, 5, tp_split::column, 0.02f, false);
  REQUIRE(g.nodes()[0].params.size() == 1);  // the weight only
  std::vector<tensor> in;
  in.push_back(test::random_tensor({2, 3, 7}, 31));
  check_node(g, 0, in);
}

TEST_CASE("an untied output layer has its own weight and its gradients match", "[grad]") {
  graph g;
  int ids = g.add_input("tokens", {}, dtype::i32);
  int x = layers::embedding(g, "embed", ids, 13, 9, 6);
  layers::lm_head(g, "output", x, 6, 13, "output_layer.weight");
  REQUIRE(g.nodes()[1].params.size() == 1);
  CHECK(g.nodes()[1].params[0].name == "output_layer.weight");
  CHECK(g.parameter_count() == 13 * 6 + 9 * 6 + 13 * 6);  // wte, wpe and the head, untied
  graph h;
  int y = h.add_input("x", {6}, dtype::f32);
  layers::lm_head(h, "output", y, 6, 13, "output_layer.weight");
  std::vector<tensor> in;
  in.push_back(test::random_tensor({2, 3, 6}, 32));
  check_node(h, 0, in);
}

TEST_CASE("rmsnorm gradients match finite differences", "[grad]") {
  graph g;
  int x = g.add_input("x", {10}, dtype::f32);
  layers::rmsnorm(g, "norm", x, 10, 1e-5f);
  std::vector<tensor> in;
  in.push_back(test::random_tensor({2, 3, 10}, 33));
  check_node(g, 0, in, {1e-2, 2e-3, 2e-2});
}

TEST_CASE("rotary embedding gradients match finite differences", "[grad]") {
  // 4 query heads, 2 K/V groups, heads of 6: Q and K rotated, V copied;
  // positions start at 5.
  graph g;
  const int W = (4 + 2 * 2) * 6;
  int x = g.add_input("qkv", {W}, dtype::f32);
  layers::rotary(g, "rope", x, 4, 2, 6, 10000.0f, 5);
  std::vector<tensor> in;
  in.push_back(test::random_tensor({2, 5, W}, 34));
  check_node(g, 0, in);
}

TEST_CASE("swiglu gradients match finite differences", "[grad]") {
  graph g;
  int x = g.add_input("gate_up", {18}, dtype::f32);
  layers::swiglu(g, "swiglu", x, 9);
  std::vector<tensor> in;
  in.push_back(test::random_tensor({2, 3, 18}, 35, 2.0f));
  check_node(g, 0, in);
}

TEST_CASE("grouped-query and multi-query attention gradients match finite differences", "[grad]") {
  // 4 query heads of 4 channels over 2 K/V groups, then 1 (multi-query);
  // T = 67 crosses a query block boundary.
  for (int groups : {2, 1}) {
    INFO("groups " << groups);
    const int C = 16, NH = 4, W = C + 2 * groups * (C / NH);
    graph g;
    int x = g.add_input("qkv", {W}, dtype::f32);
    layers::grouped_query_attention(g, "attn", x, C, NH, groups, 67);
    std::vector<tensor> in;
    in.push_back(test::random_tensor({2, 67, W}, 36 + groups));
    check_node(g, 0, in, {1e-2, 2e-3, 2e-2});
  }
}

TEST_CASE("whole GPT gradients match finite differences of the mean loss", "[grad]") {
  gpt_config cfg{.vocab = 17, .max_seq = 9, .layers = 2, .dim = 12, .heads = 3};
  check_model_gradients(build_gpt(cfg), cfg.vocab, cfg.max_seq, 3);
}

TEST_CASE("a Llama-shaped block's gradients match finite differences of the mean loss", "[grad]") {
  // RMSNorm, bias-free fused qkv, rotary, grouped-query attention (4 heads,
  // 2 groups), SwiGLU on a fused gate/up projection, an untied head.
  namespace ly = layers;
  const int V = 17, T = 9, C = 16, NH = 4, G = 2, hs = C / NH, F = 24;
  graph g;
  int tokens = g.add_input("tokens", {}, dtype::i32);
  int targets = g.add_input("targets", {}, dtype::i32);
  int x = ly::embedding(g, "embed", tokens, V, T, C);
  int h = ly::rmsnorm(g, "norm1", x, C);
  h = ly::linear(g, "attn.qkv", h, C, C + 2 * G * hs, tp_split::column, 0.02f, false);
  h = ly::rotary(g, "attn.rope", h, NH, G, hs, 10000.0f, 0);
  h = ly::grouped_query_attention(g, "attn.core", h, C, NH, G, T);
  h = ly::linear(g, "attn.proj", h, C, C, tp_split::row, 0.02f, false);
  x = ly::residual(g, "res1", x, h, C);
  h = ly::rmsnorm(g, "norm2", x, C);
  h = ly::linear(g, "mlp.gate_up", h, C, 2 * F, tp_split::column, 0.02f, false);
  h = ly::swiglu(g, "mlp.swiglu", h, F);
  h = ly::linear(g, "mlp.down", h, F, C, tp_split::row, 0.02f, false);
  x = ly::residual(g, "res2", x, h, C);
  x = ly::rmsnorm(g, "norm_f", x, C);
  int logits = ly::lm_head(g, "output", x, C, V, "output_layer.weight");
  g.set_loss(ly::cross_entropy(g, "loss", logits, targets, V));

  check_model_gradients(g, V, T, 4);
}

TEST_CASE("token embedding gradients match finite differences", "[grad]") {
  graph g;
  int ids = g.add_input("tokens", {}, dtype::i32);
  layers::token_embedding(g, "embed", ids, 13, 6);
  std::vector<tensor> in;
  in.push_back(test::random_ids({2, 7}, 13, 5));
  in.front().data<int32_t>()[2] = in.front().data<int32_t>()[11];  // a repeated token accumulates
  check_node(g, 0, in);
}

TEST_CASE("whole Llama gradients match finite differences of the mean loss", "[grad]") {
  gpt_config cfg{.family = model_family::llama,
                 .vocab = 17,
                 .max_seq = 9,
                 .layers = 2,
                 .dim = 16,
                 .heads = 4,
                 .query_groups = GENERATE(1, 2, 4),
                 .ffn_hidden = 24};
  INFO("groups " << cfg.query_groups);
  graph g = build_model(cfg);
  std::vector<std::string> names;
  for (const auto& node : g.nodes())
    for (const auto& spec : node.params) names.push_back(spec.name);
  auto has = [&](const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  CHECK(has("output_layer.weight"));  // untied
  CHECK(has("decoder.layers.1.mlp.linear_fc1.weight"));
  CHECK_FALSE(has("wpe"));  // no position table
  CHECK_FALSE(has("decoder.layers.0.self_attention.linear_qkv.bias"));
  check_model_gradients(g, cfg.vocab, cfg.max_seq, 11);
}
