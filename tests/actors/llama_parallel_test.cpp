// The Llama family on the actor runtime gives the single-device losses in
// every layout: grouped-query attention split by heads (K/V heads split
// when tp divides the groups, replicated when the groups divide tp),
// SwiGLU's [gate | up] split per half, with pipelines, schedules,
// recomputation, sequence parallelism and the distributed optimizer.
// Tolerance as parallel_equivalence_test.cpp states: 1e-5 relative.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/parallel_trainer.hpp"
#include "core/checksum.hpp"
#include "model/sharded_checkpoint.hpp"
#include "model/trainer.hpp"
#include "partition/tp_rewrite.hpp"
#include "tests/actors/layout_options.hpp"
#include "tests/model/test_util.hpp"

using namespace merak;
using merak::partition::schedule_kind;

namespace {

model::train_options tiny_llama(int64_t steps, int groups) {
  auto o = test::layout_test_options(steps);
  o.model.family = model::model_family::llama;
  o.model.query_groups = groups;  // of 8 heads
  o.model.ffn_hidden = 64;
  return o;
}

struct llama_case {
  int dp, tp, pp, m, overlap;
  schedule_kind kind;
  actors::recompute_mode rc;
  bool sp = false;
  partition::sharding_strategy sharding = partition::sharding_strategy::no_shard;
  int chunks = 1;
};

void expect_single_device(const model::train_options& o, const llama_case& c,
                          const std::vector<double>& reference) {
  auto par = test::parallel_layout(c.dp, c.tp, c.pp, c.m, c.kind, c.chunks);
  par.tp_overlap = c.overlap;
  par.recompute = c.rc;
  par.sequence_parallel = c.sp;
  par.sharding = c.sharding;
  par.bucket_bytes = 8192;
  par.timeout_s = 60;
  INFO(par.str() << " groups " << o.model.query_groups);
  actors::parallel_trainer tr(o, par, test::layout_test_corpus());
  for (size_t s = 0; s < reference.size(); ++s) {
    const double loss = tr.train_step().loss;
    INFO("step " << s + 1 << ": " << loss << " vs " << reference[s]);
    REQUIRE(std::abs(loss - reference[s]) <= 1e-5 * std::abs(reference[s]));
  }
}

}  // namespace

TEST_CASE("a tiny Llama under dp and pp matches the single device",
          "[actors][equivalence][llama]") {
  const auto o = tiny_llama(10, 2);
  const auto reference = test::single_device_losses(o);
  using rm = actors::recompute_mode;
  const llama_case cases[] = {
      {2, 1, 1, 1, 0, schedule_kind::one_f_one_b, rm::none},
      {1, 1, 2, 4, 0, schedule_kind::one_f_one_b, rm::none},
      {1, 1, 2, 4, 0, schedule_kind::gpipe, rm::full},
      {2, 1, 2, 2, 0, schedule_kind::one_f_one_b, rm::none},
  };
  for (const auto& c : cases) expect_single_device(o, c, reference);
}

TEST_CASE("a tiny Llama under tensor parallelism matches the single device",
          "[actors][equivalence][llama][tp]") {
  using rm = actors::recompute_mode;
  const auto optim = partition::sharding_strategy::optim;
  SECTION("two groups: split over tp 2, replicated over tp 4 and 8") {
    const auto o = tiny_llama(10, 2);
    const auto reference = test::single_device_losses(o);
    const llama_case cases[] = {
        {1, 2, 1, 1, 0, schedule_kind::one_f_one_b, rm::none},
        {1, 4, 1, 2, 1, schedule_kind::one_f_one_b, rm::none},
        {1, 8, 1, 1, 0, schedule_kind::one_f_one_b, rm::none},
        {2, 2, 2, 2, 1, schedule_kind::shifted, rm::stage_aware},
        {1, 4, 2, 4, 0, schedule_kind::zb_h1, rm::selective},
        {1, 2, 2, 4, 1, schedule_kind::interleaved, rm::none, false,
         partition::sharding_strategy::no_shard, 2},
        {1, 4, 1, 2, 2, schedule_kind::one_f_one_b, rm::none, true},
        {2, 4, 1, 2, 1, schedule_kind::one_f_one_b, rm::full, true, optim},
    };
    for (const auto& c : cases) expect_single_device(o, c, reference);
  }
  SECTION("bf16 activations, against the single device in bf16") {
    auto o = tiny_llama(10, 2);
    o.model.activations = model::dtype::bf16;
    const auto reference = test::single_device_losses(o);
    auto par = test::parallel_layout(1, 4, 2, 4, schedule_kind::one_f_one_b, 1);
    par.tp_overlap = 1;
    par.sequence_parallel = true;
    par.timeout_s = 60;
    actors::parallel_trainer tr(o, par, test::layout_test_corpus());
    for (size_t s = 0; s < reference.size(); ++s) {
      const double loss = tr.train_step().loss;
      INFO("step " << s + 1 << ": " << loss << " vs " << reference[s]);
      REQUIRE(std::abs(loss - reference[s]) <= 1e-3 * std::abs(reference[s]));
    }
  }
  SECTION("multi-query attention (one group) over tp 2") {
    const auto o = tiny_llama(10, 1);
    expect_single_device(o, {1, 2, 1, 2, 1, schedule_kind::one_f_one_b, rm::none},
                         test::single_device_losses(o));
  }
}

TEST_CASE("a Llama split the TP rewrite cannot make is refused naming the groups",
          "[actors][tp][llama]") {
  auto o = tiny_llama(1, 2);
  o.model.heads = 4;
  o.model.query_groups = 4;
  o.model.dim = 24;  // 4 heads of 6; groups 4 over tp 8
  auto g = model::build_model(o.model);
  CHECK_THAT(partition::tp_divisibility_error(g, 8),
             Catch::Contains("tp 8 does not divide the 4 attention heads"));
  o.model.heads = 6;
  o.model.query_groups = 3;
  o.model.dim = 24;
  g = model::build_model(o.model);
  CHECK_THAT(partition::tp_divisibility_error(g, 2),
             Catch::Contains("3 query groups") && Catch::Contains("--num-query-groups"));
}

TEST_CASE("a padded vocabulary split over the shards gives the single-device losses",
          "[actors][equivalence][tp][vocab]") {
  using rm = actors::recompute_mode;
  for (bool llama : {false, true}) {
    // 130 ids padded to 256 rows: over tp 4, shard 2 holds two real ids and
    // shard 3 none.
    auto o = llama ? tiny_llama(6, 2) : test::layout_test_options(6);
    o.model.vocab = 130;
    REQUIRE(o.model.padded_vocab() == 256);
    const auto reference = test::single_device_losses(o);
    INFO((llama ? "llama" : "gpt"));
    expect_single_device(o, {1, 4, 1, 2, 1, schedule_kind::one_f_one_b, rm::none}, reference);
    expect_single_device(o, {1, 4, 2, 4, 0, schedule_kind::one_f_one_b, rm::none, true},
                         reference);
  }
}

TEST_CASE("tensor parallelism holds a 1/tp share of the vocabulary tables on each shard",
          "[actors][tp][vocab][memory]") {
  auto params = [](int tp) {
    auto par = test::parallel_layout(1, tp, 1, 1, schedule_kind::one_f_one_b, 1);
    actors::parallel_trainer tr(test::layout_test_options(1), par, test::layout_test_corpus());
    tr.train_step();
    return tr.last_memory().parameters;
  };
  const auto o = test::layout_test_options(1);
  const int64_t table = int64_t(o.model.padded_vocab()) * o.model.dim * 4;  // tied wte, float
  const int64_t one = params(1), two = params(2);
  // Everything a pair splits, and the table, halves; the rest (norms, the
  // row biases, wpe) stays.
  CHECK(one - two > table / 2);
  CHECK(two < one / 2 + one / 10);
}

TEST_CASE("a Llama checkpoint with replicated K/V heads reshards to any layout",
          "[actors][checkpoint][llama][tp]") {
  const int64_t steps = 6;
  const auto o = tiny_llama(steps, 2);
  const auto reference = test::single_device_losses(o);
  auto dir = std::filesystem::temp_directory_path() /
             ("merak_llama_ckpt_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto run = [&](int dp, int tp, bool load, int from, int to) {
    auto x = o;
    if (load) x.load = dir.string();
    x.save_dir = dir.string();
    auto par = test::parallel_layout(dp, tp, 1, 2, schedule_kind::one_f_one_b, 1);
    par.sharding = dp > 1 ? partition::sharding_strategy::optim
                          : partition::sharding_strategy::no_shard;
    par.timeout_s = 60;
    actors::parallel_trainer tr(x, par, test::layout_test_corpus());
    REQUIRE(tr.step() == from);
    for (int s = from; s < to; ++s) {
      INFO("step " << s + 1 << " " << par.str());
      REQUIRE(tr.train_step().loss == Approx(reference[size_t(s)]).epsilon(1e-5));
    }
    tr.save();
  };
  run(1, 4, false, 0, 2);  // 2 groups over 4 shards: each K/V head on two
  {
    model::checkpoint_reader ckpt(dir.string());
    int replicated = 0;
    for (auto& r : ckpt.records()) replicated += r.spec.copies() > 1 ? 1 : 0;
    CHECK(replicated == 4 * o.model.layers);  // every QKV slice of every layer
  }
  run(2, 2, true, 2, 4);  // split K/V, distributed optimizer
  run(1, 8, true, 4, 5);  // one query head and a K/V copy per shard
  auto x = o;
  x.load = dir.string();
  model::trainer single(x, test::layout_test_corpus());
  REQUIRE(single.step() == 5);
  CHECK(single.train_step().loss == Approx(reference[5]).epsilon(1e-5));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a sharded checkpoint that lost a tensor of its model is not exported",
          "[actors][checkpoint][tp]") {
  auto dir = std::filesystem::temp_directory_path() /
             ("merak_lost_tensor_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto o = tiny_llama(1, 2);
  o.save_dir = dir.string();
  {
    actors::parallel_trainer tr(o, test::parallel_layout(1, 2, 1, 1, schedule_kind::one_f_one_b, 1),
                                test::layout_test_corpus());
    tr.train_step();
    tr.save();
  }
  model::checkpoint_reader whole(dir.string());
  const auto index_path = std::filesystem::path(whole.dir()) / "index.json";
  auto j = nlohmann::json::parse(std::ifstream(index_path));
  REQUIRE(j["tensors"].contains("decoder.final_layernorm.weight"));
  j["tensors"].erase("decoder.final_layernorm.weight");
  j.erase("crc32c");
  const std::string text = j.dump(1);
  j["crc32c"] = fmt::format("v1:{:08x}", crc32c(text.data(), text.size()));
  std::ofstream(index_path) << j.dump(1);
  CHECK_THROWS_WITH(model::export_single_device(model::checkpoint_reader(dir.string()),
                                                (dir / "single").string()),
                    Catch::Contains("lacks tensor 'decoder.final_layernorm.weight'"));
  CHECK_FALSE(std::filesystem::exists(dir / "single"));
  std::filesystem::remove_all(dir);
}
