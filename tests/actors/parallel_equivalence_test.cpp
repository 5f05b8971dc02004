// Every data x tensor x pipeline configuration on the actor runtime gives the
// single-device losses.
//
// Tolerance: 1e-5 relative per step. The runs see the same data and the same
// initial weights; they differ only in the order floating-point sums are
// taken (gradients accumulate micro-batch by micro-batch, replicas are summed
// by the reducer, the tied embedding's two halves are added on different
// stages, the gradient norm is summed per stage and shard, a row-parallel
// layer's output is the sum of the shards' partial products, and
// sub-pipelined TP accumulates parameter gradients per half micro-batch).
// Over 20 AdamW steps of the tiny model these differences stay below 1e-6
// in practice.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "actors/parallel_trainer.hpp"
#include "model/layers.hpp"
#include "model/trainer.hpp"
#include "partition/recompute.hpp"
#include "partition/stages.hpp"
#include "tests/actors/layout_options.hpp"
#include "tests/model/test_util.hpp"

using namespace merak;
using merak::partition::schedule_kind;

namespace {

model::train_options tiny(int64_t steps) {
  return test::layout_test_options(steps);
}

model::text_corpus corpus() {
  return test::layout_test_corpus();
}

std::vector<double> single_device_losses(int64_t steps,
                                         model::dtype activations = model::dtype::f32) {
  auto opts = tiny(steps);
  opts.model.activations = activations;
  return test::single_device_losses(opts);
}

// One layout of a table-driven test.
struct layout_case {
  int dp, tp, pp, m, overlap;
  schedule_kind kind;
  actors::recompute_mode rc;
  int chunks = 1;  // interleaved: model chunks per pipeline stage
};

// Trains `opts` with `par` on the actors; every step's loss must equal the
// single device's `reference` within `tol` (relative; the file's 1e-5 unless
// a test says otherwise).
void expect_reference_losses(const model::train_options& opts, const actors::parallel_options& par,
                             const std::vector<double>& reference, double tol = 1e-5) {
  actors::parallel_trainer tr(opts, par, corpus());
  for (size_t s = 0; s < reference.size(); ++s) {
    double loss = tr.train_step().loss;
    INFO("step " << s + 1 << ": " << loss << " vs " << reference[s]);
    REQUIRE(std::abs(loss - reference[s]) <= tol * std::abs(reference[s]));
  }
}

// Trains `opts` on layout `c` (small gradient buckets: several reductions
// overlap backward); each step's loss within `tol` (relative) of reference.
void expect_losses(const model::train_options& opts, const layout_case& c,
                   const std::vector<double>& reference, double tol) {
  auto par = test::parallel_layout(c.dp, c.tp, c.pp, c.m, c.kind, c.chunks);
  par.tp_overlap = c.overlap;
  par.recompute = c.rc;
  par.bucket_bytes = 8192;
  par.timeout_s = 60;
  INFO("dp=" << c.dp << " tp=" << c.tp << " pp=" << c.pp << " m=" << c.m << " tp-overlap "
             << c.overlap << " chunks " << c.chunks << " " << partition::schedule_name(c.kind)
             << " recompute=" << partition::recompute_kind_name(c.rc));
  expect_reference_losses(opts, par, reference, tol);
}

// One slice of a Chrome trace the trainer wrote: the op, the virtual stage
// of the stage actor that ran it (replica 0, TP shard 0 tracks only), and
// its time in microseconds.
struct trace_op {
  std::string name;
  int stage;
  double start, end;
};

std::vector<trace_op> read_trace_ops(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in);
  auto j = nlohmann::json::parse(in);
  std::map<int, int> stage_of_track;
  for (auto& e : j["traceEvents"])
    if (e["ph"] == "M") {
      int dp = -1, stage = -1, tp = -1;
      auto name = e["args"]["name"].get<std::string>();
      if (std::sscanf(name.c_str(), "stage (dp=%d, pp=%d, tp=%d)", &dp, &stage, &tp) == 3 &&
          dp == 0 && tp == 0)
        stage_of_track[e["tid"].get<int>()] = stage;
    }
  std::vector<trace_op> out;
  for (auto& e : j["traceEvents"])
    if (e["ph"] == "X" && stage_of_track.count(e["tid"].get<int>())) {
      const double ts = e["ts"].get<double>();
      out.push_back({e["name"].get<std::string>(), stage_of_track[e["tid"].get<int>()], ts,
                     ts + e["dur"].get<double>()});
    }
  return out;
}

}  // namespace

TEST_CASE("every dp x pp configuration, schedule and recomputation matches the single device",
          "[actors][equivalence]") {
  const int64_t steps = 20;
  static const auto reference = single_device_losses(steps);
  struct config {
    int dp, pp, m;
  };
  const config configs[] = {{1, 1, 4}, {2, 1, 1}, {4, 1, 2}, {8, 1, 2}, {1, 2, 4}, {1, 3, 4},
                            {1, 4, 4}, {1, 8, 8}, {2, 2, 2}, {2, 2, 4}, {2, 4, 2}, {4, 2, 2}};
  for (auto c : configs)
    for (auto kind : {schedule_kind::gpipe, schedule_kind::one_f_one_b, schedule_kind::shifted})
      for (auto rc : {actors::recompute_mode::none, actors::recompute_mode::full,
                      actors::recompute_mode::stage_aware}) {
        if (c.pp == 1 && kind != schedule_kind::one_f_one_b) continue;  // schedules need stages
        actors::parallel_options par;
        par.dp = c.dp;
        par.pp = c.pp;
        par.micro_batches = c.m;
        par.schedule = kind;
        par.recompute = rc;
        par.timeout_s = 60;
        // Small buckets: several reductions overlap each backward; large:
        // one bucket at the end.
        par.bucket_bytes = c.dp == 4 ? int64_t(1) << 30 : 8192;
        INFO("dp=" << c.dp << " pp=" << c.pp << " m=" << c.m << " "
                   << partition::schedule_name(kind) << " recompute=" << int(rc));
        actors::parallel_trainer tr(tiny(steps), par, corpus());
        REQUIRE(int(tr.stage_bounds().size()) == c.pp + 1);
        for (int64_t s = 0; s < steps; ++s) {
          double loss = tr.train_step().loss;
          INFO("step " << s + 1 << ": " << loss << " vs " << reference[s]);
          REQUIRE(std::abs(loss - reference[s]) <= 1e-5 * std::abs(reference[s]));
        }
      }
}

TEST_CASE(
    "every configuration with tensor parallelism and dp x tp x pp <= 8 matches the single device",
    "[actors][equivalence][tp]") {
  const int64_t steps = 20;
  static const auto reference = single_device_losses(steps);
  struct config {
    int dp, tp, pp, m;
  };
  const config configs[] = {{1, 2, 1, 1}, {2, 2, 1, 2}, {4, 2, 1, 1}, {1, 2, 2, 4},
                            {1, 2, 3, 4}, {1, 2, 4, 4}, {2, 2, 2, 2}, {1, 4, 1, 2},
                            {2, 4, 1, 1}, {1, 4, 2, 4}, {1, 8, 1, 1}};
  const schedule_kind kinds[] = {schedule_kind::gpipe, schedule_kind::one_f_one_b,
                                 schedule_kind::shifted};
  const actors::recompute_mode modes[] = {actors::recompute_mode::none,
                                          actors::recompute_mode::full,
                                          actors::recompute_mode::stage_aware};
  int i = 0;
  for (auto c : configs)
    for (int overlap : {0, 1, 2}) {
      // Each TP config runs every overlap level; schedules and recomputation
      // modes rotate so that every pair of them meets TP somewhere.
      auto kind = c.pp == 1 ? schedule_kind::one_f_one_b : kinds[(overlap + i) % 3];
      auto rc = c.pp == 1 ? actors::recompute_mode::none : modes[(overlap + 2 * i) % 3];
      actors::parallel_options par;
      par.dp = c.dp;
      par.tp = c.tp;
      par.pp = c.pp;
      par.micro_batches = c.m;
      par.tp_overlap = overlap;
      par.bucket_bytes = 4096 << overlap;
      par.schedule = kind;
      par.recompute = rc;
      par.timeout_s = 60;
      INFO("dp=" << c.dp << " tp=" << c.tp << " pp=" << c.pp << " m=" << c.m << " tp-overlap "
                 << overlap << " " << partition::schedule_name(kind) << " recompute=" << int(rc));
      actors::parallel_trainer tr(tiny(steps), par, corpus());
      for (int64_t s = 0; s < steps; ++s) {
        double loss = tr.train_step().loss;
        INFO("step " << s + 1 << ": " << loss << " vs " << reference[s]);
        REQUIRE(std::abs(loss - reference[s]) <= 1e-5 * std::abs(reference[s]));
      }
      if (overlap == 2) {
        model::trainer single(tiny(steps), corpus());
        while (!single.done()) single.train_step();
        CHECK(tr.validation_loss() == Approx(single.validation_loss()).epsilon(1e-5));
      }
      ++i;
    }
}

// bf16: layouts against the single device in bf16. Tolerance 1e-3 relative
// per step: a sum formed in another order differs in its last float bits,
// which now and then flips the rounding of an activation to bf16 (a change
// of 2^-8 in that element); such flips average out in the loss but do not
// vanish as in float (the largest difference measured over these layouts is
// about 1.2e-4). A missing all-reduce or a shard that ran in float changes
// the losses by far more; bf16 against float is the training tests' part.
TEST_CASE("layouts in bf16 match the single device in bf16", "[actors][equivalence][bf16]") {
  const int64_t steps = 20;
  static const auto reference = single_device_losses(steps, model::dtype::bf16);
  using rm = actors::recompute_mode;
  const layout_case cases[] = {{2, 1, 1, 1, 0, schedule_kind::one_f_one_b, rm::none},
                               {1, 1, 2, 4, 0, schedule_kind::one_f_one_b, rm::full},
                               {1, 1, 4, 4, 0, schedule_kind::shifted, rm::stage_aware},
                               {1, 2, 1, 1, 0, schedule_kind::one_f_one_b, rm::none},
                               {1, 2, 2, 4, 1, schedule_kind::gpipe, rm::none},
                               {2, 2, 2, 2, 2, schedule_kind::shifted, rm::stage_aware}};
  auto opts = tiny(steps);
  opts.model.activations = model::dtype::bf16;
  for (auto& c : cases) expect_losses(opts, c, reference, 1e-3);
}

// zb-h1: each backward split into B (input gradients, what the stage before
// waits for) and W (the linear layers' weight gradients, run where the stage
// would wait). The same sums as 1F1B, so the same tolerance.
TEST_CASE("the zb-h1 schedule on the stage actors matches the single device",
          "[actors][equivalence][zb]") {
  const int64_t steps = 20;
  static const auto reference = single_device_losses(steps);
  const auto zb = schedule_kind::zb_h1;
  const auto none = actors::recompute_mode::none;
  const layout_case cases[] = {{1, 1, 2, 4, 0, zb, none}, {1, 1, 4, 8, 0, zb, none},
                               {2, 1, 2, 2, 0, zb, none}, {1, 2, 2, 4, 0, zb, none},
                               {1, 2, 2, 4, 1, zb, none}, {2, 2, 2, 2, 2, zb, none}};
  for (auto& c : cases) expect_losses(tiny(steps), c, reference, 1e-5);
  actors::parallel_options bad;
  bad.pp = 2;
  bad.micro_batches = 4;
  bad.schedule = schedule_kind::zb_h1;
  bad.recompute = actors::recompute_mode::full;
  CHECK_THROWS_WITH(bad.validate(16), Catch::Contains("zb-h1 runs without recomputation"));
}

// Interleaved 1F1B: every model chunk of a pipeline device is a stage actor
// and the device's chunk 0 decides which chunk runs what. The same sums as
// 1F1B over pp x chunks stages, so the same tolerance.
TEST_CASE("the interleaved schedule on the stage actors matches the single device",
          "[actors][equivalence][interleaved]") {
  const int64_t steps = 20;
  static const auto reference = single_device_losses(steps);
  const auto il = schedule_kind::interleaved;
  const auto none = actors::recompute_mode::none, full = actors::recompute_mode::full;
  const layout_case cases[] = {{1, 1, 2, 4, 0, il, none, 2}, {1, 1, 2, 2, 0, il, none, 3},
                               {1, 1, 4, 4, 0, il, none, 2}, {1, 1, 2, 4, 0, il, full, 2},
                               {2, 1, 2, 2, 0, il, none, 2}, {1, 2, 2, 4, 1, il, none, 2},
                               {2, 2, 2, 2, 2, il, full, 2}};
  for (auto& c : cases) expect_losses(tiny(steps), c, reference, 1e-5);
  actors::parallel_options bad;
  bad.pp = 2;
  bad.micro_batches = 3;
  bad.schedule = il;
  bad.chunks = 2;
  CHECK_THROWS_WITH(bad.validate(15), Catch::Contains("a multiple of --pp 2"));
  bad.micro_batches = 4;
  bad.chunks = 1;
  CHECK_THROWS_WITH(bad.validate(16), Catch::Contains("--chunks of at least 2"));
  bad.schedule = schedule_kind::one_f_one_b;
  bad.chunks = 2;
  CHECK_THROWS_WITH(bad.validate(16), Catch::Contains("--chunks 2 needs --schedule interleaved"));
}

// The device's ops follow the interleaved order: read back from the trace
// of the last step, a device's chunks never compute at once, run their
// forwards in Megatron-LM's order (p micro-batches of chunk 0, then of
// chunk 1, ...) and their backwards with the chunks reversed, and hold no
// more micro-batches in flight than the warm-up allows.
TEST_CASE("an interleaved device runs one chunk's op at a time in the schedule's order",
          "[actors][interleaved]") {
  const int p = 2, v = 2, m = 4;
  auto trace = std::filesystem::temp_directory_path() /
               ("merak-interleaved-trace-" + std::to_string(::getpid()) + ".json");
  actors::parallel_options par;
  par.pp = p;
  par.chunks = v;
  par.micro_batches = m;
  par.schedule = schedule_kind::interleaved;
  par.trace_path = trace.string();
  par.timeout_s = 60;
  actors::parallel_trainer tr(tiny(2), par, corpus());
  REQUIRE(int(tr.stage_bounds().size()) == p * v + 1);
  CHECK_THAT(tr.describe(), Catch::Contains("pp=2 x 2 chunks"));
  tr.train_step();
  tr.train_step();
  const auto slices = read_trace_ops(trace.string());
  std::filesystem::remove(trace);
  for (int d = 0; d < p; ++d) {
    // This device's ops: those of its chunks' actors (virtual stages c*p+d).
    std::vector<trace_op> ops;
    for (auto& s : slices)
      if (s.stage % p == d && s.name != "adamw") ops.push_back(s);
    std::sort(ops.begin(), ops.end(), [](auto& a, auto& b) { return a.start < b.start; });
    REQUIRE(int(ops.size()) == 2 * m * v);
    auto pol = partition::make_policy(schedule_kind::interleaved, p, m, d, false, v);
    int f = 0, b = 0, in_flight = 0, most = 0;
    for (size_t k = 0; k < ops.size(); ++k) {
      INFO("device " << d << " op " << k << ": " << ops[k].name << " of virtual stage "
                     << ops[k].stage);
      if (k > 0) CHECK(ops[k].start >= ops[k - 1].end);  // one at a time
      const int chunk = ops[k].stage / p;
      const bool fwd = ops[k].name[0] == 'F';
      const int n = fwd ? f++ : b++;
      // k-th forward: micro-batch (n / (p v)) p + n % p of chunk (n / p) % v;
      // backwards the same with the chunks reversed.
      const int mb = (n / (p * v)) * p + n % p, c = fwd ? (n / p) % v : v - 1 - (n / p) % v;
      CHECK(ops[k].name ==
            partition::op_name({fwd ? partition::op_kind::F : partition::op_kind::B, mb, c}));
      CHECK(chunk == c);
      in_flight += fwd ? 1 : -1;
      most = std::max(most, in_flight);
    }
    CHECK(most <= pol.warm);
  }
}

TEST_CASE("a tensor-parallel split that does not divide is refused by name", "[actors][tp]") {
  actors::parallel_options par;
  par.tp = 3;
  CHECK_THROWS_WITH(actors::parallel_trainer(tiny(1), par, corpus()),
                    Catch::Contains("tp 3 does not divide") && Catch::Contains("h0."));
  par.tp = 16;
  CHECK_THROWS_WITH(actors::parallel_trainer(tiny(1), par, corpus()), Catch::Contains("tp 16"));
}

TEST_CASE("the validation loss of a pipeline run equals the single device's", "[actors]") {
  model::trainer single(tiny(5), corpus());
  while (!single.done()) single.train_step();
  actors::parallel_options par;
  par.pp = 3;
  par.dp = 2;
  par.micro_batches = 2;
  actors::parallel_trainer tr(tiny(5), par, corpus());
  while (!tr.done()) tr.train_step();
  CHECK(tr.validation_loss() == Approx(single.validation_loss()).epsilon(1e-5));
}

TEST_CASE("a stage that fails ends the run with its coordinate, promptly", "[actors][failure]") {
  // Bytes above the vocabulary make the embedding on stage 0 throw.
  auto o = tiny(3);
  o.model.vocab = 64;
  actors::parallel_options par;
  par.pp = 2;
  par.dp = 2;
  par.micro_batches = 2;
  par.timeout_s = 30;
  actors::parallel_trainer tr(o, par, corpus());
  auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(tr.train_step(), Catch::Contains("stage actor (dp=") &&
                                         Catch::Contains("pp=0, tp=0)") &&
                                         Catch::Contains("outside [0, 64)"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
}

TEST_CASE("a tensor-parallel shard that fails ends the run promptly, its peers too",
          "[actors][failure][tp]") {
  auto o = tiny(3);
  o.model.vocab = 64;
  actors::parallel_options par;
  par.pp = 2;
  par.tp = 2;
  par.dp = 2;
  par.micro_batches = 2;
  par.timeout_s = 30;
  auto t0 = std::chrono::steady_clock::now();
  {
    actors::parallel_trainer tr(o, par, corpus());
    CHECK_THROWS_WITH(tr.train_step(),
                      Catch::Contains("stage actor (dp=") && Catch::Contains("outside [0, 64)"));
  }  // the trainer's end waits for every actor
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
}

TEST_CASE("bad parallel options are refused by name", "[actors]") {
  actors::parallel_options par;
  par.dp = 3;
  CHECK_THROWS_WITH(actors::parallel_trainer(tiny(1), par, corpus()),
                    Catch::Contains("--batch 16 does not split into --dp 3"));
  par.dp = 1;
  par.pp = 2;
  par.stage_bounds = {0, 5};
  CHECK_THROWS_WITH(actors::parallel_trainer(tiny(1), par, corpus()),
                    Catch::Contains("stage bounds [0, 5] do not split"));
  par.stage_bounds.clear();
  par.pp = 200;
  CHECK_THROWS_WITH(actors::parallel_trainer(tiny(1), par, corpus()), Catch::Contains("at most"));
}

TEST_CASE("the scheduler refuses a memory budget no plan fits, naming the stage", "[actors]") {
  actors::parallel_options par;
  par.pp = 4;
  par.micro_batches = 4;
  par.recompute = actors::recompute_mode::stage_aware;
  par.memory_budget = 1000;
  auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(
      actors::parallel_trainer(tiny(2), par, corpus()),
      Catch::Contains("scheduler: stage 0 needs") && Catch::Contains("--memory-budget 1000"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  // A budget that fits only with recomputation: the plan recomputes on early stages.
  par.memory_budget = 0;
  actors::parallel_trainer tr(tiny(2), par, corpus());
  CHECK_THAT(tr.recompute_plan(),
             Catch::Contains("stage 0:") && Catch::Contains("stage 3: 0 segments"));
}

TEST_CASE("a parallel run's checkpoint resumes under another parallel layout and on one device",
          "[actors][checkpoint]") {
  const int64_t steps = 6;
  static const auto reference = single_device_losses(steps);
  auto dir = std::filesystem::temp_directory_path() /
             ("merak_parallel_ckpt_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  {
    auto o = tiny(steps);
    o.save_dir = dir.string();
    actors::parallel_options par;
    par.dp = 2;
    par.tp = 2;
    par.micro_batches = 2;
    actors::parallel_trainer tr(o, par, corpus());
    for (int s = 0; s < 3; ++s) REQUIRE(tr.train_step().loss == Approx(reference[s]).epsilon(1e-5));
    tr.save();
  }
  {
    auto o = tiny(steps);
    o.load = dir.string();
    actors::parallel_options par;
    par.pp = 2;
    par.tp = 4;
    par.micro_batches = 2;
    actors::parallel_trainer tr(o, par, corpus());
    CHECK(tr.step() == 3);
    for (int s = 3; s < steps; ++s) {
      INFO("step " << s + 1);
      CHECK(tr.train_step().loss == Approx(reference[s]).epsilon(1e-5));
    }
  }
  {
    auto o = tiny(steps);
    o.load = dir.string();
    model::trainer tr(o, corpus());
    CHECK(tr.step() == 3);
    for (int s = 3; s < steps; ++s)
      CHECK(tr.train_step().loss == Approx(reference[s]).epsilon(1e-5));
  }
  std::filesystem::remove_all(dir);
}

namespace {

// A model that is not GPT, written for one device with the layer API: an
// attention-free language model of residual GELU-MLP blocks with a head of
// its own, and parameter names of its own. merak must partition, shard and
// schedule it as it does GPT. With `long_skip`, the embedding's output is
// also added again before the head: no single tensor then crosses any cut
// inside the blocks, and deeper pipelines carry it along as an extra tensor.
model::graph mlp_model(const model::gpt_config& c, bool long_skip) {
  namespace ly = model::layers;
  model::graph g;
  int tokens = g.add_input("tokens", {}, model::dtype::i32);
  int targets = g.add_input("targets", {}, model::dtype::i32);
  const int e = ly::embedding(g, "embed", tokens, c.vocab, c.max_seq, c.dim, "tok_emb", "pos_emb");
  int x = e;
  for (int l = 0; l < c.layers; ++l) {
    auto p = "block" + std::to_string(l) + ".";
    int h = ly::layernorm(g, p + "norm", x, c.dim);
    h = ly::linear(g, p + "up", h, c.dim, 2 * c.dim, model::tp_split::column);
    h = ly::gelu(g, p + "act", h, 2 * c.dim);
    h = ly::linear(g, p + "down", h, 2 * c.dim, c.dim, model::tp_split::row);
    x = ly::residual(g, p + "res", x, h, c.dim);
  }
  if (long_skip) x = ly::residual(g, "skip", x, e, c.dim);
  x = ly::layernorm(g, "final_norm", x, c.dim);
  int logits = ly::lm_head(g, "head", x, c.dim, c.vocab, "head.weight");
  g.set_loss(ly::cross_entropy(g, "loss", logits, targets, c.vocab));
  return g;
}

model::graph mlp_language_model(const model::gpt_config& c) {
  return mlp_model(c, false);
}
model::graph long_skip_model(const model::gpt_config& c) {
  return mlp_model(c, true);
}

model::train_options tiny_custom(int64_t steps) {
  auto o = tiny(steps);
  o.model.build = mlp_language_model;
  return o;
}

}  // namespace

TEST_CASE(
    "a model of the user's own, built with the layer API, trains in parallel as on one device",
    "[actors][equivalence][custom]") {
  const int64_t steps = 12;
  std::vector<double> reference;
  {
    model::trainer single(tiny_custom(steps), corpus());
    bool custom = false;  // the custom graph, not GPT
    for (auto& n : single.model_graph().nodes()) custom = custom || n.name == "block0.up";
    REQUIRE(custom);
    while (!single.done()) reference.push_back(single.train_step().loss);
    REQUIRE(reference.back() < reference.front());  // it learns
  }
  using rm = actors::recompute_mode;
  const layout_case cases[] = {{2, 1, 1, 1, 0, schedule_kind::one_f_one_b, rm::none},
                               {1, 2, 1, 1, 0, schedule_kind::one_f_one_b, rm::none},
                               {1, 1, 2, 4, 0, schedule_kind::one_f_one_b, rm::full},
                               {1, 1, 3, 4, 0, schedule_kind::shifted, rm::stage_aware},
                               {2, 2, 2, 2, 0, schedule_kind::gpipe, rm::none}};
  for (auto& c : cases) expect_losses(tiny_custom(steps), c, reference, 1e-5);
}

TEST_CASE("a skip connection across every stage boundary travels as an extra tensor",
          "[actors][equivalence][custom]") {
  const int64_t steps = 8;
  auto opts = tiny(steps);
  opts.model.build = long_skip_model;
  const auto g = model::build_model(opts.model);
  // Single-tensor cuts exist only outside the blocks (before the first,
  // after the skip's sum, the final norm and the head).
  for (int c : partition::cut_points(g)) {
    INFO("cut before " << g.nodes()[size_t(c)].name);
    const auto& name = g.nodes()[size_t(c)].name;
    CHECK((name.rfind("block", 0) != 0 || name == "block0.norm"));
  }
  const auto bounds = partition::balanced_stages(g, 3);
  const auto crossing = partition::crossing_counts(g);
  CHECK(crossing[size_t(bounds[1])] >= 2);
  CHECK(crossing[size_t(bounds[2])] >= 2);
  std::vector<double> reference;
  {
    model::trainer single(opts, corpus());
    while (!single.done()) reference.push_back(single.train_step().loss);
  }
  struct config {
    int dp, tp, pp, m;
  };
  for (auto c : {config{1, 1, 3, 4}, config{1, 1, 4, 4}, config{2, 1, 3, 2}, config{1, 2, 3, 2}}) {
    actors::parallel_options par;
    par.dp = c.dp;
    par.tp = c.tp;
    par.pp = c.pp;
    par.micro_batches = c.m;
    par.recompute = actors::recompute_mode::full;
    par.timeout_s = 60;
    INFO("dp=" << c.dp << " tp=" << c.tp << " pp=" << c.pp << " m=" << c.m);
    expect_reference_losses(opts, par, reference);
  }
  // Stage bounds given by the caller (as a planner's plan gives them), here
  // in the middle of a block.
  actors::parallel_options par;
  par.pp = 2;
  par.micro_batches = 2;
  par.timeout_s = 60;
  const int n = int(g.nodes().size());
  par.stage_bounds = {0, n / 2, n};
  INFO("pp=2 with stage bounds 0, " << n / 2 << ", " << n);
  CHECK(crossing[size_t(n / 2)] >= 2);
  expect_reference_losses(opts, par, reference);
}

TEST_CASE("a custom model without the inputs training feeds is refused by name",
          "[actors][custom]") {
  auto o = tiny(1);
  o.model.build = [](const model::gpt_config& c) {
    model::graph g;
    int tokens = g.add_input("ids", {}, model::dtype::i32);
    int targets = g.add_input("targets", {}, model::dtype::i32);
    int x = model::layers::embedding(g, "embed", tokens, c.vocab, c.max_seq, c.dim);
    int logits = model::layers::lm_head(g, "head", x, c.dim, c.vocab, "head.weight");
    g.set_loss(model::layers::cross_entropy(g, "loss", logits, targets, c.vocab));
    return g;
  };
  REQUIRE_THROWS_WITH(model::trainer(o, corpus()),
                      Catch::Contains("input 0 is \"ids\"") && Catch::Contains("\"tokens\""));
  actors::parallel_options par;
  par.dp = 2;
  REQUIRE_THROWS_WITH(actors::parallel_trainer(o, par, corpus()), Catch::Contains("custom model"));
  // The sparse codecs compress the token embedding; a model without one says so.
  par.sparse.kind = comm::codec_kind::s2;
  REQUIRE_THROWS_WITH(actors::parallel_trainer(tiny_custom(1), par, corpus()),
                      Catch::Contains("\"wte\", which this model does not have"));
}

TEST_CASE("selective recomputation matches the single device and holds less",
          "[actors][equivalence][recompute]") {
  const int64_t steps = 20;
  static const auto reference = single_device_losses(steps);
  {  // one device: the same bits as keeping the attention probabilities
    auto o = tiny(steps);
    o.recompute_attention = true;
    CHECK(test::single_device_losses(o) == reference);
  }
  using rm = actors::recompute_mode;
  const layout_case cases[] = {{2, 2, 2, 2, 1, schedule_kind::one_f_one_b, rm::selective},
                               {1, 1, 2, 4, 0, schedule_kind::zb_h1, rm::selective},
                               {1, 2, 2, 4, 2, schedule_kind::shifted, rm::selective},
                               {2, 1, 2, 4, 0, schedule_kind::interleaved, rm::selective, 2}};
  for (auto& c : cases) expect_losses(tiny(steps), c, reference, 1e-5);

  int stage0_layers = 0;
  auto peak = [&](rm mode) {
    auto par = test::parallel_layout(1, 1, 2, 4, schedule_kind::one_f_one_b, 1);
    par.recompute = mode;
    actors::parallel_trainer tr(tiny(1), par, corpus());
    tr.train_step();
    const auto g = model::build_model(tiny(1).model);
    stage0_layers = 0;
    for (int n = tr.stage_bounds()[0]; n < tr.stage_bounds()[1]; ++n)
      stage0_layers += g.nodes()[size_t(n)].kind == "attention";
    return tr.last_memory().activations_peak;
  };
  const int64_t kept = peak(rm::none), selective = peak(rm::selective);
  // The peak is stage 0's, holding 2 micro-batches (1F1B, pp 2); each of its
  // layers keeps (B, NH, T, T) probabilities less: B = 16 / 4, NH = 8,
  // T = 16, float.
  REQUIRE(stage0_layers > 0);
  CHECK(kept - selective == 2 * stage0_layers * (4 * 8 * 16 * 16) * 4);
}

TEST_CASE("sequence parallelism matches the single device in every layout",
          "[actors][equivalence][tp][sp]") {
  const int64_t steps = 20;
  static const auto reference = single_device_losses(steps);
  static const auto reference_bf16 = single_device_losses(steps, model::dtype::bf16);
  using rm = actors::recompute_mode;
  struct sp_case {
    layout_case layout;
    bool bf16 = false;
    partition::sharding_strategy sharding = partition::sharding_strategy::no_shard;
  };
  const sp_case cases[] = {
      {{1, 2, 1, 1, 0, schedule_kind::one_f_one_b, rm::none}},
      {{1, 2, 1, 2, 1, schedule_kind::one_f_one_b, rm::none}},
      {{1, 4, 1, 2, 2, schedule_kind::one_f_one_b, rm::none}},
      {{2, 2, 2, 2, 1, schedule_kind::shifted, rm::stage_aware}},
      {{1, 2, 2, 4, 2, schedule_kind::one_f_one_b, rm::full}},
      {{1, 2, 2, 4, 0, schedule_kind::zb_h1, rm::selective}},
      // zb-h1 gathers a linear's input again for its weight gradient.
      {{1, 2, 2, 4, 0, schedule_kind::zb_h1, rm::none}},
      {{2, 2, 2, 2, 1, schedule_kind::zb_h1, rm::none}},
      {{1, 2, 2, 4, 1, schedule_kind::interleaved, rm::none, 2}},
      {{1, 2, 2, 2, 1, schedule_kind::gpipe, rm::none}, true},
      {{2, 2, 1, 2, 1, schedule_kind::one_f_one_b, rm::none}, false,
       partition::sharding_strategy::optim},
  };
  for (auto& c : cases) {
    auto& l = c.layout;
    auto par = test::parallel_layout(l.dp, l.tp, l.pp, l.m, l.kind, l.chunks);
    par.tp_overlap = l.overlap;
    par.recompute = l.rc;
    par.bucket_bytes = 8192;
    par.timeout_s = 60;
    par.sequence_parallel = true;
    par.sharding = c.sharding;
    auto o = tiny(steps);
    if (c.bf16) o.model.activations = model::dtype::bf16;
    INFO(par.str() << (c.bf16 ? " bf16" : ""));
    expect_reference_losses(o, par, c.bf16 ? reference_bf16 : reference, c.bf16 ? 1e-3 : 1e-5);
  }
}

TEST_CASE("sequence parallelism holds fewer activations on each shard, fewer with more shards",
          "[actors][tp][sp][memory]") {
  auto peak = [](int tp, bool sp) {
    auto par = test::parallel_layout(1, tp, 1, 1, schedule_kind::one_f_one_b, 1);
    par.sequence_parallel = sp;
    actors::parallel_trainer tr(tiny(1), par, corpus());
    tr.train_step();
    return tr.last_memory().activations_peak;
  };
  const int64_t one = peak(1, false), tp2 = peak(2, false), sp2 = peak(2, true);
  CHECK(sp2 < tp2);
  CHECK(tp2 < one);
  CHECK(peak(4, true) < sp2);
}

TEST_CASE("sequence parallelism is refused by name where it cannot split",
          "[actors][tp][sp]") {
  auto par = test::parallel_layout(2, 1, 1, 1, schedule_kind::one_f_one_b, 1);
  par.sequence_parallel = true;
  CHECK_THROWS_WITH(actors::parallel_trainer(tiny(1), par, corpus()),
                    Catch::Contains("--sequence-parallel") && Catch::Contains("--tp 2 or more"));
  par = test::parallel_layout(1, 2, 1, 1, schedule_kind::one_f_one_b, 1);
  par.sequence_parallel = true;
  auto o = tiny(1);
  o.model.max_seq = 15;
  CHECK_THROWS_WITH(actors::parallel_trainer(o, par, corpus()),
                    Catch::Contains("15 tokens") && Catch::Contains("--tp 2"));
}

TEST_CASE("a stage-aware budget that selective recomputation meets recomputes only attention",
          "[actors][recompute]") {
  const int64_t steps = 6;
  static const auto reference = single_device_losses(steps);
  auto par = test::parallel_layout(1, 1, 2, 4, schedule_kind::one_f_one_b, 1);
  par.recompute = actors::recompute_mode::stage_aware;
  par.timeout_s = 60;
  // The stages' bytes keeping everything, as the scheduler counts them.
  std::vector<int> bounds;
  {
    actors::parallel_trainer probe(tiny(1), par, corpus());
    bounds = probe.stage_bounds();
  }
  const auto g = model::build_model(tiny(steps).model);
  int64_t most = 0, most_selective = 0;
  for (int s = 0; s < 2; ++s) {
    auto m = partition::describe_stage(g, s, bounds[s], bounds[s + 1], 4 * 16, 2 - s);
    most = std::max(most, partition::stage_bytes(m, 0));
    most_selective = std::max(most_selective, partition::stage_bytes(m, 0, true));
  }
  REQUIRE(most_selective < most);
  par.memory_budget = most_selective;
  actors::parallel_trainer tr(tiny(steps), par, corpus());
  CHECK_THAT(tr.recompute_plan(), Catch::Contains("0 segments recomputed (the rest selective)"));
  for (int64_t s = 0; s < steps; ++s) {
    const double loss = tr.train_step().loss;
    INFO("step " << s + 1);
    REQUIRE(std::abs(loss - reference[size_t(s)]) <= 1e-5 * std::abs(reference[size_t(s)]));
  }
  CHECK(tr.last_memory().activations_peak > 0);
}

TEST_CASE("recomputation by whole layers (--recompute-num-layers) matches the single device",
          "[actors][equivalence][recompute]") {
  const int64_t steps = 8;
  static const auto reference = single_device_losses(steps);
  struct config {
    int tp, pp, m, layers;
    schedule_kind kind;
    actors::recompute_mode rc;
    int chunks = 1;
  };
  const config configs[] = {
      {1, 2, 4, 1, schedule_kind::one_f_one_b, actors::recompute_mode::full},
      {1, 2, 4, 2, schedule_kind::one_f_one_b, actors::recompute_mode::full},
      {2, 2, 4, 1, schedule_kind::gpipe, actors::recompute_mode::full},
      {1, 4, 4, 1, schedule_kind::one_f_one_b, actors::recompute_mode::stage_aware},
      {1, 2, 4, 1, schedule_kind::interleaved, actors::recompute_mode::full, 2}};
  for (auto c : configs) {
    std::vector<std::string> plans;  // by half layers, then by c.layers
    for (int layers : {0, c.layers}) {
      actors::parallel_options par;
      par.tp = c.tp;
      par.pp = c.pp;
      par.micro_batches = c.m;
      par.schedule = c.kind;
      par.chunks = c.chunks;
      par.recompute = c.rc;
      par.recompute_layers = layers;
      par.recompute_ratio = 1.0;  // stage-aware: stage 0 recomputes every segment
      par.timeout_s = 60;
      INFO(par.str());
      actors::parallel_trainer tr(tiny(steps), par, corpus());
      for (int64_t s = 0; s < steps; ++s) {
        double loss = tr.train_step().loss;
        INFO("step " << s + 1 << ": " << loss << " vs " << reference[s]);
        REQUIRE(std::abs(loss - reference[s]) <= 1e-5 * std::abs(reference[s]));
      }
      plans.push_back(tr.recompute_plan());
    }
    // The stages report their segments to the scheduler, which plans
    // stage-aware recomputation by them: whole layers make fewer.
    if (c.rc == actors::recompute_mode::stage_aware) {
      INFO(plans[0] << " | " << plans[1]);
      CHECK(plans[0].find("stage 0: 3 segments recomputed") != std::string::npos);
      CHECK(plans[1].find("stage 0: 2 segments recomputed") != std::string::npos);
    }
  }
}
