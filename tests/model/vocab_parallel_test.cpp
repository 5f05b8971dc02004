// Vocabulary parallelism's pieces against the whole-vocabulary layers: the
// shards' embedding lookups sum to the whole table's, the shards' loss
// statistics give the whole softmax cross-entropy over the unpadded ids,
// and their gradients are the whole gradient's columns; the padded ids take
// no part. Also the shard layouts of grouped [Q | K | V] weights.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>

#include "model/backend.hpp"
#include "model/layers.hpp"
#include "model/parameter.hpp"
#include "tests/model/test_util.hpp"

using namespace merak;
using namespace merak::model;

namespace {

backend& cpu() {
  return backend_for(device::cpu());
}

// Columns [first, first + n) of (rows, cols).
tensor columns(const tensor& t, int first, int n) {
  const int64_t rows = t.numel() / t.dim(-1), cols = t.dim(-1);
  shape_t sh = t.shape();
  sh.back() = n;
  tensor out(sh);
  for (int64_t r = 0; r < rows; ++r)
    for (int c = 0; c < n; ++c) out.f32()[r * n + c] = t.f32()[r * cols + first + c];
  return out;
}

void expect_near(const tensor& a, const tensor& b, double tol, const char* what) {
  REQUIRE(a.shape() == b.shape());
  for (int64_t i = 0; i < a.numel(); ++i) {
    INFO(what << " [" << i << "]: " << a.f32()[i] << " vs " << b.f32()[i]);
    REQUIRE(std::abs(a.f32()[i] - b.f32()[i]) <= tol * (1 + std::abs(b.f32()[i])));
  }
}

}  // namespace

TEST_CASE("vocabulary-parallel cross-entropy equals the whole softmax over the unpadded ids",
          "[vocab]") {
  const int B = 2, T = 5, V = 12, valid = 10, parts = 3, Vs = V / parts;
  auto logits = test::random_tensor({B, T, V}, 1, 3.0f);
  auto targets = test::random_ids({B, T}, valid, 2);
  targets.data<int32_t>()[0] = valid - 1;  // the last real id, on the last shard
  tensor losses({B, T}), probs({B * T, V});
  cpu().crossentropy_forward(losses, probs, logits, targets, valid);
  for (int64_t n = 0; n < B * T; ++n)
    for (int v = valid; v < V; ++v) CHECK(probs.f32()[n * V + v] == 0.f);
  auto dl = test::random_tensor({B, T}, 3);
  auto dlogits = tensor::zeros({B, T, V});
  cpu().crossentropy_backward(dlogits, dl, probs, targets);

  auto stats = tensor::zeros({B, T, 2 * parts});
  std::vector<tensor> shard_logits;
  for (int k = 0; k < parts; ++k) {
    shard_logits.push_back(columns(logits, k * Vs, Vs));
    tensor mine({B, T, 2 * parts});
    cpu().vocab_ce_stats(mine, shard_logits.back(), targets, k * Vs, valid, k);
    for (int64_t i = 0; i < mine.numel(); ++i) stats.f32()[i] += mine.f32()[i];  // the tp sum
  }
  tensor vp_losses({B, T});
  cpu().vocab_ce_loss(vp_losses, stats);
  expect_near(vp_losses, losses, 1e-5, "loss");
  for (int k = 0; k < parts; ++k) {
    auto d = tensor::zeros({B, T, Vs});
    cpu().vocab_ce_backward(d, dl, shard_logits[size_t(k)], stats, targets, k * Vs, valid);
    expect_near(d, columns(dlogits, k * Vs, Vs), 1e-5, "dlogits");
  }
}

TEST_CASE("padded cross-entropy gradients match finite differences and skip the padding",
          "[vocab][grad]") {
  graph g;
  int z = g.add_input("logits", {8}, dtype::f32);
  int t = g.add_input("targets", {}, dtype::i32);
  layers::cross_entropy(g, "loss", z, t, 8, 6);
  auto l = g.nodes()[0].make({});
  auto logits = test::random_tensor({1, 4, 8}, 4, 2.0f);
  auto targets = test::random_ids({1, 4}, 6, 5);
  std::vector<const tensor*> in{&logits, &targets};
  auto loss_sum = [&] {
    stash st;
    tensor out({1, 4});
    l->forward(in, out, st);
    double s = 0;
    for (float x : out.span_f32()) s += x;
    return s;
  };
  stash st;
  tensor out({1, 4});
  l->forward(in, out, st);
  auto ones = tensor::zeros({1, 4});
  for (auto& x : ones.span_f32()) x = 1.f;
  auto d = tensor::zeros({1, 4, 8});
  std::vector<tensor*> din{&d, nullptr};
  l->backward(in, ones, din, st);
  for (int64_t i = 0; i < logits.numel(); ++i) {
    const float saved = logits.f32()[i];
    logits.f32()[i] = saved + 1e-2f;
    const double fp = loss_sum();
    logits.f32()[i] = saved - 1e-2f;
    const double fm = loss_sum();
    logits.f32()[i] = saved;
    INFO("d/dlogits[" << i << "]");
    CHECK(std::abs((fp - fm) / 2e-2 - d.f32()[i]) <= 2e-3);
    if (i % 8 >= 6) CHECK(d.f32()[i] == 0.f);
  }
  auto bad = test::random_ids({1, 4}, 6, 5);
  bad.data<int32_t>()[2] = 6;  // a padded id as a target
  std::vector<const tensor*> bad_in{&logits, &bad};
  stash st2;
  CHECK_THROWS_WITH(l->forward(bad_in, out, st2),
                    Catch::Contains("target id 6 at position 2 is outside [0, 6)"));
}

TEST_CASE("the shards' embedding lookups sum to the whole table's", "[vocab]") {
  const int B = 2, T = 3, C = 4, V = 8, parts = 2, rows = V / parts;
  auto wte = test::random_tensor({V, C}, 6), wpe = test::random_tensor({T, C}, 7);
  auto tokens = test::random_ids({B, T}, V, 8);
  tokens.data<int32_t>()[1] = tokens.data<int32_t>()[4];  // a repeated token accumulates
  tensor whole({B, T, C});
  cpu().encoder_forward(whole, tokens, wte, wpe);
  auto dout = test::random_tensor({B, T, C}, 9);
  auto dwte = tensor::zeros({V, C}), dwpe = tensor::zeros({T, C});
  cpu().encoder_backward(dwte, dwpe, dout, tokens);
  auto sum = tensor::zeros({B, T, C});
  for (int k = 0; k < parts; ++k) {
    tensor part({rows, C});
    std::copy(wte.f32() + k * rows * C, wte.f32() + (k + 1) * rows * C, part.f32());
    tensor out({B, T, C});
    cpu().embedding_shard_forward(out, tokens, part, k == 0 ? &wpe : nullptr, k * rows);
    for (int64_t i = 0; i < out.numel(); ++i) sum.f32()[i] += out.f32()[i];
    auto dpart = tensor::zeros({rows, C}), dpos = tensor::zeros({T, C});
    cpu().embedding_shard_backward(dpart, &dpos, dout, tokens, k * rows);
    tensor want({rows, C});
    std::copy(dwte.f32() + k * rows * C, dwte.f32() + (k + 1) * rows * C, want.f32());
    expect_near(dpart, want, 0, "dwte rows");
    expect_near(dpos, dwpe, 0, "dwpe");  // every shard, the same
  }
  expect_near(sum, whole, 0, "embedding");
}

TEST_CASE("grouped [Q | K | V] shards split the query heads and split or replicate K/V",
          "[vocab][shard]") {
  shard_spec s;
  s.dim = 0;
  s.blocks = {8, 2, 2};  // 8 query heads, 2 K/V groups, heads of 3 rows
  s.unit = 3;
  s.full = {36, 5};
  s.parts = 2;
  s.index = 1;
  CHECK(s.copies() == 1);
  CHECK(shard_shape(s) == shape_t{18, 5});
  std::vector<std::pair<int64_t, int64_t>> runs;
  for_each_shard_block(s, [&](int64_t b, int64_t n, bool) { runs.push_back({b, n}); });
  CHECK(runs == std::vector<std::pair<int64_t, int64_t>>{{12, 12}, {27, 3}, {33, 3}});
  s.parts = 4;
  s.index = 3;  // query heads 6, 7; K/V group 1 (with shard 2)
  CHECK(s.copies() == 2);
  CHECK(shard_shape(s) == shape_t{12, 5});
  runs.clear();
  for_each_shard_block(s, [&](int64_t b, int64_t n, bool rep) {
    runs.push_back({b, n});
    CHECK(rep == (b >= 24));
  });
  CHECK(runs == std::vector<std::pair<int64_t, int64_t>>{{18, 6}, {27, 3}, {33, 3}});
  CHECK(replicated_numel(s) == 12 * 5);
  std::vector<std::array<int64_t, 3>> packed;
  for_each_replicated_run(s, [&](int64_t at, int64_t from, int64_t n) {
    packed.push_back({at, from, n});
  });
  CHECK(packed == std::vector<std::array<int64_t, 3>>{{15, 30, 15}, {45, 45, 15}});
  auto full = test::random_tensor({36, 5}, 10);
  tensor part(shard_shape(s));
  copy_shard(full, part, s);
  CHECK(part.f32()[0] == full.f32()[18 * 5]);
  CHECK(part.f32()[6 * 5] == full.f32()[27 * 5]);
  s.parts = 3;
  s.index = 0;
  CHECK_THAT(shard_split_error(s), Catch::Contains("3 parts do not split a block of 8"));
}
