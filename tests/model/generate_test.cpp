// The cached decoder (model/generate.hpp) against the training graph's full
// forward: every step's logits agree with the full sequence's, and padded
// output rows are never chosen.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "model/executor.hpp"
#include "model/generate.hpp"
#include "model/gpt.hpp"
#include "model/parameter.hpp"
#include "tests/model/test_util.hpp"

using namespace merak;
using namespace merak::model;

namespace {

gpt_config tiny_gpt() {
  return {.vocab = 23, .max_seq = 12, .layers = 2, .dim = 16, .heads = 4};
}

gpt_config tiny_llama() {
  return {.family = model_family::llama,
          .vocab = 29,
          .max_seq = 12,
          .layers = 2,
          .dim = 16,
          .heads = 4,
          .query_groups = 2,
          .ffn_hidden = 24,
          .rotary_base = 1000.0f,
          .norm_epsilon = 1e-6f};
}

// Every parameter of the graph's store replaced by random values (biases and
// norm weights included, so that each takes part in the comparison).
void randomise(parameter_store& store) {
  uint64_t seed = 100;
  for (auto& p : store.all()) {
    auto v = test::random_tensor(p->spec.shape, ++seed, 0.3f);
    if (p->spec.init == init_kind::ones)
      for (auto& x : v.span_f32()) x += 1.0f;
    p->value = std::move(v);
  }
}

// The logits (T, V) of the whole sequence through the training graph: the
// executor over every node but the loss.
std::vector<float> full_forward(const graph& g, parameter_store& store,
                                const std::vector<int32_t>& seq) {
  executor ex(g, store, 0, int(g.nodes().size()) - 1);
  REQUIRE(ex.input_values().size() == 1);
  REQUIRE(ex.output_values().size() == 1);
  tensor tokens({1, int64_t(seq.size())}, dtype::i32);
  std::copy(seq.begin(), seq.end(), tokens.data<int32_t>());
  std::vector<tensor> in;
  in.push_back(std::move(tokens));
  auto out = ex.infer(std::move(in));
  const tensor& z = out.outputs.at(0);
  return {z.f32(), z.f32() + z.numel()};
}

// max |a - b| over a row, relative to the row's largest |b|.
double row_error(const float* a, const float* b, int n) {
  double err = 0, scale = 0;
  for (int i = 0; i < n; ++i) {
    err = std::max(err, std::abs(double(a[i]) - b[i]));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return err / scale;
}

void check_cache_against_full_forward(const gpt_config& cfg) {
  graph g = build_model(cfg);
  parameter_store store(7);
  executor make_params(g, store);  // creates every parameter
  randomise(store);
  std::vector<int32_t> seq;
  rng r(3, 1);
  for (int t = 0; t < cfg.max_seq; ++t) seq.push_back(int32_t(r.below(uint64_t(cfg.vocab))));
  const auto want = full_forward(g, store, seq);
  const int V = cfg.padded_vocab();  // logits of every row, the padding's too

  kv_decoder dec(cfg, store_weights(store));
  REQUIRE(dec.logit_rows() == V);
  const int prompt = 5;
  // Prefill: one row of logits per prompt position.
  const auto& pre = dec.append(std::span(seq).first(prompt), true);
  REQUIRE(pre.size() == size_t(prompt) * V);
  for (int t = 0; t < prompt; ++t) {
    INFO("prefill position " << t);
    CHECK(row_error(pre.data() + int64_t(t) * V, want.data() + int64_t(t) * V, V) < 1e-5);
  }
  // Then one position at a time over the cache.
  for (int t = prompt; t < cfg.max_seq; ++t) {
    INFO("step at position " << t);
    const auto& row = dec.append(std::span(seq).subspan(size_t(t), 1));
    REQUIRE(row.size() == size_t(V));
    CHECK(row_error(row.data(), want.data() + int64_t(t) * V, V) < 1e-5);
  }
  CHECK(dec.length() == cfg.max_seq);
  CHECK_THROWS_WITH(dec.append(std::span(seq).first(1)),
                    Catch::Contains("12 cached positions plus 1 new ones pass the model's 12"));

  // A wrong weight would make the comparison fail: perturb one and see.
  auto& p = *store.all().back();
  p.value.f32()[0] += 1.0f;
  kv_decoder changed(cfg, store_weights(store));
  std::vector<float> first(changed.append(std::span(seq).first(prompt)));
  p.value.f32()[0] -= 1.0f;
  kv_decoder same(cfg, store_weights(store));
  const auto& again = same.append(std::span(seq).first(prompt));
  CHECK(row_error(first.data(), again.data(), V) > 1e-5);
}

}  // namespace

TEST_CASE("the cached GPT decoder's logits are the full forward's at every step",
          "[generate]") {
  check_cache_against_full_forward(tiny_gpt());
}

TEST_CASE("the cached Llama decoder (grouped-query) gives the full forward's logits",
          "[generate]") {
  check_cache_against_full_forward(tiny_llama());
}

TEST_CASE("the cached multi-query Llama decoder (one K/V head) gives the full forward's logits",
          "[generate]") {
  gpt_config cfg = tiny_llama();
  cfg.query_groups = 1;
  check_cache_against_full_forward(cfg);
}

TEST_CASE("greedy generation continues with the full forward's argmax", "[generate]") {
  for (const gpt_config& cfg : {tiny_gpt(), tiny_llama()}) {
    graph g = build_model(cfg);
    parameter_store store(9);
    executor make_params(g, store);
    randomise(store);
    kv_decoder dec(cfg, store_weights(store));
    const std::vector<int32_t> prompt{1, 4, 2};
    auto res = generate(dec, prompt, {.max_new_tokens = 6});
    REQUIRE(res.tokens.size() == 6);
    std::vector<int32_t> seq = prompt;
    for (int32_t next : res.tokens) {
      const auto z = full_forward(g, store, seq);
      const float* last = z.data() + int64_t(seq.size() - 1) * cfg.padded_vocab();
      CHECK(next == int32_t(std::max_element(last, last + cfg.vocab) - last));
      seq.push_back(next);
    }
  }
}

TEST_CASE("padded output rows are never chosen", "[generate]") {
  // pick_token: padding entries hold the largest logits.
  std::vector<float> logits{0.5f, 2.0f, -1.0f, 1.5f, 50.0f, 60.0f};
  rng r(1, 1);
  CHECK(pick_token(logits, 4, {}, r) == 1);
  CHECK(pick_token(logits, 6, {}, r) == 5);  // the same row unpadded picks the padding
  for (int i = 0; i < 200; ++i) {
    CHECK(pick_token(logits, 4, {.temperature = 5.0f}, r) < 4);
    CHECK(pick_token(logits, 4, {.temperature = 1.0f, .top_k = 2}, r) != 2);
  }

  // A decoder whose output layer has 8 rows past the vocabulary, each +-50
  // times a real row: the padding's logits dominate, yet only real ids come.
  gpt_config cfg = tiny_gpt();
  cfg.tied_head = false;
  cfg.vocab_divisible_by = 1;  // the padding below is the test's own
  graph g = build_model(cfg);
  parameter_store store(11);
  executor make_params(g, store);
  randomise(store);
  const int V = cfg.vocab, C = cfg.dim, pad = 8;
  auto base = store_weights(store);
  weight_source padded = [&](const std::string& name) {
    tensor t = base(name);
    if (name != "lm_head.weight") return t;
    tensor big({V + pad, C});
    std::copy(t.f32(), t.f32() + t.numel(), big.f32());
    for (int row = 0; row < pad; ++row)
      for (int c = 0; c < C; ++c)
        big.f32()[int64_t(V + row) * C + c] = (row % 2 ? -50.0f : 50.0f) * t.f32()[(row / 2) * C + c];
    return big;
  };
  kv_decoder dec(cfg, padded);
  REQUIRE(dec.logit_rows() == V + pad);
  const std::vector<int32_t> prompt{3, 1};
  const auto& z = dec.append(prompt);
  const float real_max = *std::max_element(z.begin(), z.begin() + V);
  CHECK(*std::max_element(z.begin() + V, z.end()) > real_max);
  for (const sampling s : {sampling{}, sampling{.temperature = 2.0f, .seed = 4},
                           sampling{.temperature = 1.0f, .top_k = 3, .seed = 5}}) {
    auto res = generate(dec, prompt, {.max_new_tokens = 9, .sample = s});
    REQUIRE(res.tokens.size() == 9);
    for (int32_t id : res.tokens) CHECK((id >= 0 && id < V));
  }
}

TEST_CASE("generation refuses contexts past the model's positions", "[generate]") {
  gpt_config cfg = tiny_gpt();
  graph g = build_model(cfg);
  parameter_store store(5);
  executor make_params(g, store);
  kv_decoder dec(cfg, store_weights(store));
  const std::vector<int32_t> prompt{1, 2, 3, 4, 5};
  CHECK_THROWS_WITH(generate(dec, prompt, {.max_new_tokens = 8}),
                    Catch::Contains("5 tokens plus --max-new-tokens 8") &&
                        Catch::Contains("the model's 12"));
  CHECK(generate(dec, prompt, {.max_new_tokens = 7}).tokens.size() == 7);
  CHECK_THROWS_WITH(generate(dec, {}, {}), Catch::Contains("no tokens"));
  const std::vector<int32_t> bad{1, 23};
  CHECK_THROWS_WITH(generate(dec, bad, {.max_new_tokens = 1}),
                    Catch::Contains("token id 23 is outside the model's vocabulary [0, 23)"));
  // Sampling is reproducible from its seed, and the stop id ends it.
  const sampling s{.temperature = 1.0f, .seed = 42};
  auto a = generate(dec, prompt, {.max_new_tokens = 7, .sample = s});
  auto b = generate(dec, prompt, {.max_new_tokens = 7, .sample = s});
  CHECK(a.tokens == b.tokens);
  auto stopped = generate(dec, prompt, {.max_new_tokens = 7, .sample = s, .stop = a.tokens[2]});
  CHECK(stopped.stopped);
  CHECK(stopped.tokens.size() <= 2);
}
