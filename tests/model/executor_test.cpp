// Checkpointing and recomputation change memory, never results.
#include <catch2/catch.hpp>

#include <cstring>
#include <deque>
#include <map>

#include "model/executor.hpp"
#include "model/gpt.hpp"
#include "partition/recompute.hpp"
#include "partition/stages.hpp"
#include "tests/model/test_util.hpp"

using namespace merak;
using namespace merak::model;

namespace {

std::vector<std::vector<float>> grads_of(const parameter_store& store) {
  std::vector<std::vector<float>> g;
  for (auto& p : store.all()) g.emplace_back(p->grad.f32(), p->grad.f32() + p->grad.numel());
  return g;
}

std::vector<tensor> inputs() {
  std::vector<tensor> v;
  v.push_back(test::random_ids({2, 9}, 17, 1));
  v.push_back(test::random_ids({2, 9}, 17, 2));
  return v;
}

// A (2, 16, 32) residual stream entering a stage, in the graph's activation type.
tensor stream_input(dtype type, uint64_t seed) {
  tensor f = test::random_tensor({2, 16, 32}, seed);
  if (type == dtype::f32) return f;
  tensor b({2, 16, 32}, dtype::bf16);
  convert(b.bf16s(), f.f32(), f.numel());
  return b;
}

// Node bounds of three stages of g, each ending at a cut point.
std::vector<int> three_stages(const graph& g) {
  const int n = int(g.nodes().size());
  const std::vector<int> cuts = partition::cut_points(g);
  std::vector<int> bounds{0};
  for (int third : {n / 3, 2 * n / 3}) {
    int at = 0;
    for (int c : cuts)
      if (c <= third) at = c;
    bounds.push_back(at);
  }
  bounds.push_back(n);
  return bounds;
}

// The inputs of an executor's stage of a (2, 16) micro-batch: token ids, or
// a (2, 16, 32) stream in the graph's activation type.
std::vector<tensor> stage_inputs(const graph& g, const executor& ex, int mb) {
  std::vector<tensor> in;
  for (int v : ex.input_values())
    in.push_back(g.values()[size_t(v)].type == dtype::i32
                     ? test::random_ids({2, 16}, 64, uint64_t(mb + 1))
                     : stream_input(g.values()[size_t(v)].type, uint64_t(mb + 7)));
  return in;
}

// Output gradients of 1e-3 for a stage's outputs, in their types.
std::vector<tensor> small_grads(const std::vector<tensor>& outputs) {
  std::vector<tensor> grads;
  for (auto& o : outputs) {
    tensor d(o.shape(), o.type());
    for (int64_t i = 0; i < d.numel(); ++i)
      o.type() == dtype::f32 ? void(d.f32()[i] = 1e-3f) : model::store(d.bf16s()[i], 1e-3f);
    grads.push_back(std::move(d));
  }
  return grads;
}

}  // namespace

TEST_CASE("checkpointed forwards give bit-identical gradients", "[executor]") {
  graph g = build_gpt({.vocab = 17, .max_seq = 9, .layers = 3, .dim = 12, .heads = 3});
  const int n = int(g.nodes().size());
  parameter_store ref_store(5);
  executor ref(g, ref_store);
  double ref_loss = ref.forward(0, inputs()).loss;
  ref.backward(0, {});
  auto want = grads_of(ref_store);

  for (int ckpt : {1, 7, n / 2, n - 1, n})
    for (bool keep : {true, false})
      for (bool explicit_recompute : {false, true}) {
        INFO("checkpoint " << ckpt << " keep_stash " << keep << " R before B "
                           << explicit_recompute);
        parameter_store store(5);
        executor ex(g, store);
        ex.set_checkpoint(ckpt);
        double loss = ex.forward(3, inputs(), keep).loss;
        CHECK(loss == ref_loss);
        CHECK_FALSE(ex.has_stash(3));
        if (explicit_recompute) {
          ex.recompute(3);
          CHECK(ex.has_stash(3));
        }
        ex.backward(3, {});
        auto got = grads_of(store);
        for (size_t i = 0; i < got.size(); ++i)
          CHECK(std::memcmp(got[i].data(), want[i].data(), got[i].size() * 4) == 0);
      }
}

TEST_CASE("a checkpointed micro-batch holds less activation memory", "[executor]") {
  graph g = build_gpt({.vocab = 17, .max_seq = 9, .layers = 3, .dim = 12, .heads = 3});
  parameter_store s1(5), s2(5);
  executor full(g, s1), ckpt(g, s2);
  ckpt.set_checkpoint(int(g.nodes().size()) - 3);
  full.forward(0, inputs());
  ckpt.forward(0, inputs());
  CHECK(ckpt.activation_bytes() < full.activation_bytes());
}

TEST_CASE("a range split in two stages gives the whole model's gradients", "[executor]") {
  graph g = build_gpt({.vocab = 17, .max_seq = 9, .layers = 2, .dim = 12, .heads = 3});
  parameter_store ref_store(5);
  executor ref(g, ref_store);
  ref.forward(0, inputs());
  ref.backward(0, {});
  // Cut after the first block's second residual (one activation crosses).
  int cut = 0;
  for (size_t i = 0; i < g.nodes().size(); ++i)
    if (g.nodes()[i].name == "h0.res2") cut = int(i) + 1;
  REQUIRE(cut > 0);
  parameter_store a_store(5), b_store(5);
  executor a(g, a_store, 0, cut), b(g, b_store, cut);
  REQUIRE(a.output_values().size() == 1);
  auto in = inputs();
  std::vector<tensor> a_in, b_in;
  a_in.push_back(std::move(in[0]));  // tokens
  auto fa = a.forward(0, std::move(a_in));
  for (int v : b.input_values()) {
    if (v == g.find_value("targets"))
      b_in.push_back(std::move(in[1]));
    else
      b_in.push_back(std::move(fa.outputs[0]));
  }
  b.forward(0, std::move(b_in));
  auto db = b.backward(0, {});
  std::vector<tensor> grads;
  for (size_t i = 0; i < b.input_values().size(); ++i)
    if (db[i].defined()) grads.push_back(std::move(db[i]));
  REQUIRE(grads.size() == 1);
  a.backward(0, std::move(grads));
  // Every parameter but the tied embedding lives on one stage only.
  for (auto& p : ref_store.all()) {
    if (p->spec.name == "wte") continue;
    auto q = a_store.find(p->spec.name) ? a_store.find(p->spec.name) : b_store.find(p->spec.name);
    REQUIRE(q);
    INFO(p->spec.name);
    CHECK(std::memcmp(q->grad.raw(), p->grad.raw(), p->grad.bytes()) == 0);
  }
}

TEST_CASE("a split backward and its weight gradients sum to backward, bit for bit", "[executor]") {
  // The zb-h1 schedule's B (input gradients) and W (the linear layers'
  // weight gradients, later), two micro-batches in flight, Ws in order, on
  // two stages so the input gradient crosses the boundary.
  graph g = build_gpt({.vocab = 17, .max_seq = 9, .layers = 2, .dim = 12, .heads = 3});
  int cut = 0;
  for (size_t i = 0; i < g.nodes().size(); ++i)
    if (g.nodes()[i].name == "h0.res2") cut = int(i) + 1;
  REQUIRE(cut > 0);
  auto run = [&](bool split) {
    parameter_store a_store(5), b_store(5);
    executor a(g, a_store, 0, cut), b(g, b_store, cut);
    for (int mb : {0, 1}) {
      auto in = inputs();
      std::vector<tensor> a_in, b_in;
      a_in.push_back(std::move(in[0]));
      auto fa = a.forward(mb, std::move(a_in));
      for (int v : b.input_values())
        b_in.push_back(v == g.find_value("targets") ? std::move(in[1]) : std::move(fa.outputs[0]));
      b.forward(mb, std::move(b_in));
    }
    for (int mb : {0, 1}) {
      auto db = b.backward(mb, {}, 1.0f, {}, split);
      std::vector<tensor> grads;
      for (auto& t : db)
        if (t.defined()) grads.push_back(std::move(t));
      a.backward(mb, std::move(grads), 1.0f, {}, split);
    }
    if (split) {
      CHECK(b.in_flight() == 2);  // held until their weight gradients
      for (int mb : {0, 1}) {
        b.weight_backward(mb);
        a.weight_backward(mb);
      }
      CHECK_THROWS_WITH(b.weight_backward(0), Catch::Contains("micro-batch 0"));
    }
    CHECK(a.in_flight() == 0);
    CHECK(b.in_flight() == 0);
    auto g1 = grads_of(a_store), g2 = grads_of(b_store);
    g1.insert(g1.end(), g2.begin(), g2.end());
    return g1;
  };
  auto want = run(false), got = run(true);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("parameter " << i);
    CHECK(std::memcmp(got[i].data(), want[i].data(), got[i].size() * 4) == 0);
  }
}

TEST_CASE("selective recomputation gives bit-identical gradients without the attention stash",
          "[executor][recompute]") {
  struct shape_case {
    model_family family;
    int groups;
    dtype type;
  };
  for (auto c : {shape_case{model_family::gpt, 0, dtype::f32},
                 shape_case{model_family::gpt, 0, dtype::bf16},
                 shape_case{model_family::llama, 1, dtype::f32},
                 shape_case{model_family::llama, 3, dtype::bf16}}) {
    INFO(model_family_name(c.family) << " groups " << c.groups << " " << dtype_name(c.type));
    gpt_config cfg{.vocab = 17, .max_seq = 9, .layers = 3, .dim = 12, .heads = 3};
    cfg.family = c.family;
    cfg.query_groups = c.groups;
    cfg.activations = c.type;
    graph g = build_model(cfg);
    parameter_store ref_store(5), store(5);
    executor ref(g, ref_store), sel(g, store);
    REQUIRE(sel.set_selective_recompute(true) == cfg.layers);  // one attention core a layer
    const double ref_loss = ref.forward(0, inputs()).loss;
    const double loss = sel.forward(0, inputs()).loss;
    CHECK(loss == ref_loss);
    // The (B, NH, T, T) probabilities of every layer are what is not held.
    const int64_t probabilities = int64_t(cfg.layers) * 2 * cfg.heads * 9 * 9 * dtype_size(c.type);
    CHECK(ref.activation_bytes() - sel.activation_bytes() == probabilities);
    ref.backward(0, {});
    sel.backward(0, {});
    auto want = grads_of(ref_store), got = grads_of(store);
    for (size_t i = 0; i < got.size(); ++i)
      CHECK(std::memcmp(got[i].data(), want[i].data(), got[i].size() * 4) == 0);
  }
}

TEST_CASE("recomputation by segment gives bit-identical gradients and holds one segment at a time",
          "[executor][recompute]") {
  graph g = build_gpt({.vocab = 17, .max_seq = 9, .layers = 4, .dim = 12, .heads = 3});
  const int n = int(g.nodes().size());
  auto m = partition::describe_stage(g, 0, 0, n, 2 * 9, 1);
  REQUIRE(m.segment_nodes.size() >= 4);
  const std::vector<int> starts = partition::segment_starts(m);
  parameter_store ref_store(5);
  executor ref(g, ref_store);
  const double ref_loss = ref.forward(0, inputs()).loss;
  ref.backward(0, {});
  auto want = grads_of(ref_store);
  for (bool keep : {true, false}) {  // a checkpointed prefix, or the whole range (Fpc)
    INFO("keep_stash " << keep);
    parameter_store s1(5), s2(5);
    executor whole(g, s1), segmented(g, s2);
    for (auto* ex : {&whole, &segmented}) ex->set_checkpoint(n - 2);
    segmented.set_segments(starts);
    for (auto* ex : {&whole, &segmented}) {
      ex->reset_activation_peak();
      CHECK(ex->forward(1, inputs(), keep).loss == ref_loss);
    }
    // Forward: the segmented run dropped each segment as it went.
    CHECK(segmented.activation_peak() < whole.activation_peak());
    CHECK(segmented.activation_bytes() >= whole.activation_bytes());  // it kept segment inputs
    for (auto* ex : {&whole, &segmented}) {
      ex->reset_activation_peak();
      ex->backward(1, {});
    }
    CHECK(segmented.activation_peak() < whole.activation_peak());
    for (auto* st : {&s1, &s2}) {
      auto got = grads_of(*st);
      for (size_t i = 0; i < got.size(); ++i)
        CHECK(std::memcmp(got[i].data(), want[i].data(), got[i].size() * 4) == 0);
    }
  }
  CHECK_THROWS_WITH(executor(g, ref_store).set_segments({1, 4}),
                    Catch::Contains("are not ascending inside a range"));
}

TEST_CASE("recomputation by whole layers keeps one input a layer and gives bit-identical gradients",
          "[executor][recompute]") {
  graph g = build_gpt({.vocab = 17, .max_seq = 9, .layers = 4, .dim = 12, .heads = 3});
  const int n = int(g.nodes().size());
  const auto halves = partition::describe_stage(g, 0, 0, n, 2 * 9, 1);
  const auto layers = partition::describe_stage(g, 0, 0, n, 2 * 9, 1, nullptr, 1);
  // Two segments a layer against one; the final norm, head and loss one
  // segment against three.
  REQUIRE(layers.segment_nodes.size() + 4 + 2 == halves.segment_nodes.size());
  parameter_store ref_store(5);
  executor ref(g, ref_store);
  const double ref_loss = ref.forward(0, inputs()).loss;
  ref.backward(0, {});
  auto want = grads_of(ref_store);
  parameter_store s1(5), s2(5);
  executor by_half(g, s1), by_layer(g, s2);
  by_half.set_segments(partition::segment_starts(halves));
  by_layer.set_segments(partition::segment_starts(layers));
  for (auto* ex : {&by_half, &by_layer}) {
    ex->set_checkpoint(n - 2);
    CHECK(ex->forward(1, inputs(), false).loss == ref_loss);
  }
  // Kept after forward, as the planner counts it: one (B, T, C) input fewer
  // for each of the 4 layers, and none inside the tail (the head's input,
  // and the logits the loss reads, over the vocabulary padded to 128).
  auto sum = [](const std::vector<int64_t>& v) {
    int64_t s = 0;
    for (auto x : v) s += x;
    return s;
  };
  const int64_t btc = 2 * 9 * 12 * 4, logits = 2 * 9 * 128 * 4;
  CHECK(by_half.activation_bytes() - by_layer.activation_bytes() == 4 * btc + btc + logits);
  CHECK(by_half.activation_bytes() - by_layer.activation_bytes() ==
        sum(halves.checkpoint_bytes) - sum(layers.checkpoint_bytes));
  for (auto* ex : {&by_half, &by_layer}) ex->backward(1, {});
  for (auto* st : {&s1, &s2}) {
    auto got = grads_of(*st);
    for (size_t i = 0; i < got.size(); ++i)
      CHECK(std::memcmp(got[i].data(), want[i].data(), got[i].size() * 4) == 0);
  }
}

TEST_CASE("the planner's recomputation memory equals the executor's peak for every recomputed prefix",
          "[executor][recompute]") {
  // Three stages (the embedding and the first layers, the middle layers, the
  // last layers and the loss), each with the micro-batches 1F1B holds on it
  // in flight (3, 2, 1): that many forwards, then the first one's backward,
  // with k leading segments recomputed.
  const dtype act = GENERATE(dtype::f32, dtype::bf16);
  graph g = build_gpt(
      {.vocab = 64, .max_seq = 16, .layers = 6, .dim = 32, .heads = 2, .activations = act});
  const std::vector<int> bounds = three_stages(g);
  for (int stage = 0; stage < 3; ++stage) {
    const int first = bounds[size_t(stage)], end = bounds[size_t(stage) + 1], held = 3 - stage;
    auto m = partition::describe_stage(g, stage, first, end, 2 * 16, held);
    REQUIRE(m.segment_nodes.size() >= 4);
    const std::vector<int> starts = partition::segment_starts(m);
    const int L = int(m.segment_nodes.size());
    for (int k = 0; k <= L; ++k) {
      INFO(dtype_name(act) << ", stage " << stage << ", " << k << " of " << L
                           << " segments recomputed");
      parameter_store store(5);
      executor ex(g, store, first, end);
      ex.set_segments(starts);
      int nodes = 0;
      for (int i = 0; i < k; ++i) nodes += m.segment_nodes[size_t(i)];
      ex.set_checkpoint(nodes);
      ex.reset_activation_peak();
      std::vector<tensor> first_outputs;
      for (int mb = 0; mb < held; ++mb) {
        auto r = ex.forward(mb, stage_inputs(g, ex, mb));
        if (mb == 0) first_outputs = std::move(r.outputs);
      }
      ex.backward(0, small_grads(first_outputs));
      // The most the executor held, to the byte: the stage's input once, the
      // kept activations of the micro-batches in flight (the stage's output
      // handed on), the forward's moment with the prefix's output twice, and
      // the backward's rebuilt segment.
      CHECK(partition::stage_bytes(m, k) - m.weights_bytes == ex.activation_peak());
    }
  }
}

TEST_CASE("the planner's memory of a split backward equals the executor's peak",
          "[executor][recompute]") {
  // zb-h1's stages: a micro-batch past its backward keeps what its weight
  // gradients read (the linears' inputs and output gradients) until
  // weight_backward; the next one's forward runs meanwhile. Each stage of
  // three, its warm-up of forwards, then backward, forward, weight backward
  // in turn: in flight the warm-up, awaiting weights the rest of zb-h1's
  // steady count (partition::set_in_flight).
  graph g = build_gpt({.vocab = 64, .max_seq = 16, .layers = 6, .dim = 32, .heads = 2});
  const int p = 3, m = 4;
  const std::vector<int> bounds = three_stages(g);
  for (int stage = 0; stage < p; ++stage) {
    INFO("stage " << stage);
    const int first = bounds[size_t(stage)], end = bounds[size_t(stage) + 1];
    auto mem = partition::describe_stage(g, stage, first, end, 2 * 16, 1);
    const auto pol = partition::make_policy(partition::schedule_kind::zb_h1, p, m, stage, false, 1);
    partition::set_in_flight(mem, pol, m);
    REQUIRE(mem.in_flight == p - stage);
    REQUIRE(mem.awaiting_weights == stage);
    parameter_store store(5);
    executor ex(g, store, first, end);
    ex.reset_activation_peak();
    std::map<int, std::vector<tensor>> outs;
    int forwarded = 0, backwarded = 0;
    std::deque<int> awaiting;
    for (; forwarded < mem.in_flight; ++forwarded)
      outs[forwarded] = ex.forward(forwarded, stage_inputs(g, ex, forwarded)).outputs;
    // The steady count: micro-batches forwarded and not yet done with
    // their weight gradients, which wait as long as it allows.
    const size_t steady = size_t(mem.in_flight + mem.awaiting_weights);
    while (backwarded < m) {
      ex.backward(backwarded, small_grads(outs[backwarded]), 1.0f, {}, true);
      outs.erase(backwarded);
      awaiting.push_back(backwarded++);
      if (forwarded == m) continue;
      for (; outs.size() + awaiting.size() >= steady; awaiting.pop_front())
        ex.weight_backward(awaiting.front());
      outs[forwarded] = ex.forward(forwarded, stage_inputs(g, ex, forwarded)).outputs;
      ++forwarded;
    }
    CHECK(partition::stage_bytes(mem, 0) - mem.weights_bytes == ex.activation_peak());
  }
}
