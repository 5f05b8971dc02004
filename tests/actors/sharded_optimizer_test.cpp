// The distributed optimizer (--data-parallel-sharding-strategy optim) on the
// stage actors: each layout against the same layout with every replica
// holding the whole optimizer (no_shard), and against the single device.
//
// Tolerance against no_shard: 1e-6 relative per step. Both runs reduce the
// same gradients in the same ring order (a reduce-scatter is the all-reduce's
// first half) and update every element by the same formula; only the global
// gradient norm is summed in another order (by replica slices), which moves
// the clip factor by an ulp at most.
//
// Gradient shards (optim_grads) reduce-scatter every micro-batch's gradients
// and add the sums: with one micro-batch the same bits, with several the
// micro-batches summed in another order, so 1e-5 there.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include "actors/parallel_trainer.hpp"
#include "comm/nccl_semantics.hpp"
#include "core/error.hpp"
#include "model/sharded_checkpoint.hpp"
#include "model/trainer.hpp"
#include "tests/actors/layout_options.hpp"
#include "tests/model/test_util.hpp"

using namespace merak;
using merak::partition::schedule_kind;
using merak::partition::sharding_strategy;

namespace {

struct sharded_case {
  int dp, tp, pp, m, overlap;
  schedule_kind kind;
  actors::recompute_mode rc;
  int chunks = 1;
  bool bf16 = false;
  bool sparse = false;  // the embedding's gradient through the COO codec
  bool sp = false;      // --sequence-parallel
};

actors::parallel_options options_of(const sharded_case& c, sharding_strategy s) {
  auto par = test::parallel_layout(c.dp, c.tp, c.pp, c.m, c.kind, c.chunks);
  par.tp_overlap = c.overlap;
  par.recompute = c.rc;
  par.bucket_bytes = 6000;  // several buckets a stage; sizes that do not split evenly
  par.timeout_s = 60;
  // Both runs with the same threads for every op: a borrowed core changes
  // how a GEMM splits its sums, and bf16 rounding turns that last-bit
  // change into a visible one.
  par.lend_cores = false;
  par.sharding = s;
  par.sequence_parallel = c.sp;
  if (c.sparse) par.sparse.kind = comm::codec_kind::coo;
  return par;
}

model::train_options options_of(const sharded_case& c, int64_t steps) {
  auto o = test::layout_test_options(steps);
  if (c.bf16) o.model.activations = model::dtype::bf16;
  if (c.sparse) o.model.tied_head = false;
  return o;
}

// The data-parallel bytes of the last step of a run (replica 0's reducers).
double last_step_dp_bytes(const model::train_options& o, const actors::parallel_options& par) {
  actors::parallel_trainer tr(o, par, test::layout_test_corpus());
  double sent = 0;
  while (!tr.done()) {
    tr.train_step();
    for (auto& [name, v] : tr.step_metrics())
      if (name == "dp_bytes_per_rank") sent = v;
  }
  return sent;
}

std::vector<double> losses(const model::train_options& o, const actors::parallel_options& par) {
  actors::parallel_trainer tr(o, par, test::layout_test_corpus());
  std::vector<double> out;
  while (!tr.done()) out.push_back(tr.train_step().loss);
  return out;
}

// Layout c under strategy s for `steps` steps against no_shard (within
// `against_plain`, relative) and the single device (1e-5; bf16 1e-3).
void expect_no_shard_losses(const sharded_case& c, sharding_strategy s, int64_t steps,
                            double against_plain) {
  INFO("dp=" << c.dp << " tp=" << c.tp << " pp=" << c.pp << " m=" << c.m << " "
             << partition::schedule_name(c.kind) << " chunks=" << c.chunks << " bf16=" << c.bf16
             << " coo=" << c.sparse << " sp=" << c.sp << " "
             << partition::sharding_strategy_name(s));
  const auto o = options_of(c, steps);
  const auto plain = losses(o, options_of(c, sharding_strategy::no_shard));
  const auto sharded = losses(o, options_of(c, s));
  const auto single = test::single_device_losses(o);
  REQUIRE(sharded.size() == size_t(steps));
  double worst_plain = 0, worst_single = 0;  // relative
  for (size_t k = 0; k < sharded.size(); ++k) {
    INFO("step " << k + 1 << ": " << sharded[k] << " vs " << plain[k] << " (no_shard), "
                 << single[k] << " (one device)");
    REQUIRE(std::abs(sharded[k] - plain[k]) <= against_plain * std::abs(plain[k]));
    REQUIRE(std::abs(sharded[k] - single[k]) <= (c.bf16 ? 1e-3 : 1e-5) * std::abs(single[k]));
    worst_plain = std::max(worst_plain, std::abs(sharded[k] - plain[k]) / std::abs(plain[k]));
    worst_single = std::max(worst_single, std::abs(sharded[k] - single[k]) / std::abs(single[k]));
  }
  // One line a layout for the equivalence table (ctest -V shows it).
  std::printf(
      "equivalence | %s | dp %d tp %d pp %d m %d %s recompute %s%s%s%s%s%s | %.1e | %.1e | %lld\n",
      std::string(partition::sharding_strategy_name(s)).c_str(), c.dp, c.tp, c.pp, c.m,
      std::string(partition::schedule_name(c.kind)).c_str(), partition::recompute_kind_name(c.rc),
      c.overlap > 0 ? " tp-overlap" : "", c.chunks > 1 ? " chunks 2" : "", c.sp ? " SP" : "",
      c.bf16 ? " bf16" : "", c.sparse ? " COO" : "", worst_plain, worst_single, (long long)steps);
}

}  // namespace

TEST_CASE("the distributed optimizer gives no_shard's losses in every layout",
          "[actors][equivalence][sharding]") {
  const int64_t steps = 20;
  using rm = actors::recompute_mode;
  const sharded_case cases[] = {
      {2, 1, 1, 1, 0, schedule_kind::one_f_one_b, rm::none},
      {4, 1, 1, 2, 0, schedule_kind::one_f_one_b, rm::none},
      {8, 1, 1, 2, 0, schedule_kind::one_f_one_b, rm::none},
      {2, 1, 2, 2, 0, schedule_kind::shifted, rm::full},  // the tied embedding across stages
      {2, 2, 1, 2, 1, schedule_kind::one_f_one_b, rm::none},
      {2, 2, 2, 2, 2, schedule_kind::one_f_one_b, rm::stage_aware},
      {2, 2, 2, 2, 0, schedule_kind::one_f_one_b, rm::full, 1, false, false, true},  // SP
      {2, 1, 2, 2, 0, schedule_kind::zb_h1, rm::none},
      {2, 1, 2, 4, 0, schedule_kind::interleaved, rm::none, 2},
      {2, 2, 1, 1, 0, schedule_kind::one_f_one_b, rm::none, 1, true},
      {2, 1, 2, 1, 0, schedule_kind::shifted, rm::full, 1, true},  // bf16, the tie across stages
      {2, 1, 1, 2, 0, schedule_kind::one_f_one_b, rm::none, 1, false, true},
  };
  for (auto& c : cases) expect_no_shard_losses(c, sharding_strategy::optim, steps, 1e-6);
}

TEST_CASE("S2's sketched embedding gradient gives the same losses under every sharding strategy",
          "[actors][sharding][s2]") {
  // The embedding's bucket goes through the S2 codec whole and is updated
  // whole on every replica, as under no_shard; the other buckets are
  // sharded. Each strategy follows no_shard's S2 run (not the single
  // device: the sketch's error).
  const sharded_case c{2, 1, 1, 2, 0, schedule_kind::one_f_one_b, actors::recompute_mode::none};
  auto with_s2 = [&](sharding_strategy s) {
    auto par = options_of(c, s);
    par.sparse.kind = comm::codec_kind::s2;
    par.sparse.sketch_ratio = 0.5;
    return par;
  };
  auto o = options_of(c, int64_t(8));
  o.model.tied_head = false;
  const auto plain = losses(o, with_s2(sharding_strategy::no_shard));
  const auto dense = losses(o, options_of(c, sharding_strategy::no_shard));
  REQUIRE(plain.size() == 8);
  // The sketch is in the path: S2's losses part from the dense run's.
  CHECK(std::abs(plain.back() - dense.back()) > 1e-6 * dense.back());
  for (auto s : {sharding_strategy::optim, sharding_strategy::optim_grads,
                 sharding_strategy::optim_grads_params}) {
    const auto sharded = losses(o, with_s2(s));
    REQUIRE(sharded.size() == plain.size());
    for (size_t k = 0; k < plain.size(); ++k) {
      INFO(partition::sharding_strategy_name(s) << " step " << k + 1);
      CHECK(sharded[k] == Approx(plain[k]).epsilon(1e-6));
    }
  }
}

TEST_CASE("a checkpoint of the distributed optimizer resumes unsharded, and the reverse",
          "[actors][checkpoint][sharding]") {
  const int64_t steps = 6;
  const auto o = test::layout_test_options(steps);
  const auto reference = test::single_device_losses(o);
  auto dir =
      std::filesystem::temp_directory_path() / ("merak_sharded_ckpt_" + std::to_string(::getpid()));
  auto run = [&](actors::parallel_options par, bool load, bool save, int from, int to) {
    auto x = o;
    if (load) x.load = dir.string();
    if (save) x.save_dir = dir.string();
    par.timeout_s = 60;
    actors::parallel_trainer tr(x, par, test::layout_test_corpus());
    REQUIRE(tr.step() == from);
    for (int s = from; s < to; ++s) {
      INFO("step " << s + 1 << " " << par.str());
      REQUIRE(tr.train_step().loss == Approx(reference[size_t(s)]).epsilon(1e-5));
    }
    if (save) tr.save();
  };
  auto layout = [](int dp, int tp, int pp, sharding_strategy s) {
    auto par = test::parallel_layout(dp, tp, pp, 2, schedule_kind::one_f_one_b, 1);
    par.bucket_bytes = 6000;
    par.sharding = s;
    return par;
  };
  std::filesystem::remove_all(dir);
  SECTION("optim dp 2 x pp 2 -> no_shard tp 2, and one device") {
    run(layout(2, 1, 2, sharding_strategy::optim), false, true, 0, 3);
    {  // each replica wrote its moments' pieces; nothing was gathered
      model::checkpoint_reader ckpt(dir.string());
      std::set<std::string> piece_files;
      for (auto& r : ckpt.records())
        if (r.moment_piece) piece_files.insert(r.file);
      CHECK(piece_files == std::set<std::string>{
                               model::moment_file_name(0, 0, 0), model::moment_file_name(0, 0, 1),
                               model::moment_file_name(1, 0, 0), model::moment_file_name(1, 0, 1)});
    }
    run(layout(1, 2, 1, sharding_strategy::no_shard), true, false, 3, steps);
    auto x = o;
    x.load = dir.string();
    model::trainer single(x, test::layout_test_corpus());
    REQUIRE(single.step() == 3);
    for (int s = 3; s < steps; ++s)
      CHECK(single.train_step().loss == Approx(reference[size_t(s)]).epsilon(1e-5));
  }
  SECTION("no_shard tp 2 -> optim dp 4, then optim dp 2 x tp 2") {
    run(layout(1, 2, 1, sharding_strategy::no_shard), false, true, 0, 2);
    run(layout(4, 1, 1, sharding_strategy::optim), true, true, 2, 4);
    run(layout(2, 2, 1, sharding_strategy::optim), true, false, 4, steps);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("gradient shards (optim_grads) give no_shard's losses in every layout",
          "[actors][equivalence][sharding]") {
  const int64_t steps = 20;
  using rm = actors::recompute_mode;
  const sharded_case cases[] = {
      {2, 1, 1, 1, 0, schedule_kind::one_f_one_b, rm::none},
      {4, 1, 1, 2, 0, schedule_kind::one_f_one_b, rm::none},
      {2, 1, 2, 2, 0, schedule_kind::shifted, rm::full},  // the tied embedding across stages
      {2, 2, 1, 2, 1, schedule_kind::one_f_one_b, rm::none},
      {2, 2, 1, 2, 0, schedule_kind::one_f_one_b, rm::none, 1, false, false, true},
      {2, 2, 2, 2, 2, schedule_kind::one_f_one_b, rm::stage_aware},
      // Sequence parallelism with segments recomputed inside backward.
      {2, 2, 2, 2, 0, schedule_kind::one_f_one_b, rm::stage_aware, 1, false, false, true},
      {2, 1, 2, 4, 0, schedule_kind::interleaved, rm::none, 2},
      {2, 2, 1, 1, 0, schedule_kind::one_f_one_b, rm::none, 1, true},
      {2, 1, 1, 2, 0, schedule_kind::one_f_one_b, rm::none, 1, false, true},
  };
  // One micro-batch: the same bits; several: their sums added in another order.
  for (auto& c : cases)
    expect_no_shard_losses(c, sharding_strategy::optim_grads, steps, c.m == 1 ? 1e-6 : 1e-5);
}

TEST_CASE("parameter shards (optim_grads_params) give no_shard's losses in every layout",
          "[actors][equivalence][sharding]") {
  const int64_t steps = 20;
  using rm = actors::recompute_mode;
  const sharded_case cases[] = {
      {2, 1, 1, 1, 0, schedule_kind::one_f_one_b, rm::none},
      {4, 1, 1, 2, 0, schedule_kind::one_f_one_b, rm::none},
      {2, 1, 1, 4, 0, schedule_kind::gpipe, rm::full},
      {2, 1, 1, 2, 0, schedule_kind::one_f_one_b, rm::selective},
      {2, 1, 2, 2, 0, schedule_kind::one_f_one_b, rm::none},
      {2, 1, 3, 4, 0, schedule_kind::shifted, rm::full},  // the tied embedding across stages
      {2, 2, 1, 2, 1, schedule_kind::one_f_one_b, rm::none},
      {2, 2, 1, 2, 2, schedule_kind::one_f_one_b, rm::selective},
      {2, 2, 2, 2, 2, schedule_kind::one_f_one_b, rm::stage_aware},
      {2, 1, 2, 4, 0, schedule_kind::interleaved, rm::none, 2},
      {2, 2, 1, 2, 0, schedule_kind::one_f_one_b, rm::none, 1, false, false, true},
      {2, 2, 2, 2, 0, schedule_kind::one_f_one_b, rm::full, 1, false, false, true},
      {2, 2, 1, 1, 0, schedule_kind::one_f_one_b, rm::none, 1, true},
      {2, 1, 3, 1, 0, schedule_kind::shifted, rm::full, 1, true},  // bf16, the tie across stages
      {2, 1, 1, 2, 0, schedule_kind::one_f_one_b, rm::none, 1, false, true},
  };
  // The arithmetic of optim_grads: the gathered values are the same bits.
  for (auto& c : cases)
    expect_no_shard_losses(c, sharding_strategy::optim_grads_params, steps,
                           c.m == 1 ? 1e-6 : 1e-5);
}

TEST_CASE("overlapping the all-gather with the next forward gives the same losses",
          "[actors][equivalence][sharding]") {
  // The same arithmetic as the all-gather after the update: only when each
  // bucket's values are taken differs. (Runs of one layout differ in the
  // ninth digit from run to run: the threads' share of the GEMMs follows
  // the cores lent; a value read before its bucket arrived is off by a
  // whole step's update.)
  const int64_t steps = 12;
  using rm = actors::recompute_mode;
  const sharded_case cases[] = {
      {2, 1, 1, 2, 0, schedule_kind::one_f_one_b, rm::none},
      {4, 1, 1, 1, 0, schedule_kind::one_f_one_b, rm::none},
      {2, 1, 2, 2, 0, schedule_kind::shifted, rm::full},
      {2, 2, 2, 2, 2, schedule_kind::one_f_one_b, rm::stage_aware},
      {2, 1, 2, 4, 0, schedule_kind::interleaved, rm::none, 2},
      {2, 1, 2, 2, 0, schedule_kind::zb_h1, rm::none},
      {2, 2, 1, 1, 0, schedule_kind::one_f_one_b, rm::none, 1, true},
  };
  for (auto& c : cases)
    for (auto s : {sharding_strategy::optim, sharding_strategy::optim_grads}) {
      if (s == sharding_strategy::optim_grads && c.kind == schedule_kind::zb_h1) continue;
      INFO("dp=" << c.dp << " tp=" << c.tp << " pp=" << c.pp << " m=" << c.m << " "
                 << partition::schedule_name(c.kind) << " chunks=" << c.chunks << " bf16=" << c.bf16
                 << " " << partition::sharding_strategy_name(s));
      const auto o = options_of(c, steps);
      auto after = options_of(c, s);
      auto overlapped = after;
      overlapped.overlap_param_gather = true;
      const auto want = losses(o, after);
      const auto got = losses(o, overlapped);
      REQUIRE(got.size() == size_t(steps));
      for (size_t k = 0; k < got.size(); ++k) {
        INFO("step " << k + 1 << ": " << got[k] << " vs " << want[k]);
        REQUIRE(std::abs(got[k] - want[k]) <= 1e-6 * std::abs(want[k]));
      }
    }
}

TEST_CASE("bf16 runs all-gather the GEMM weights as bf16 and checkpoint exact values",
          "[actors][equivalence][sharding][checkpoint]") {
  // Bytes: replica 0's reducer sends its slice of every bucket in each
  // all-gather (dp 2); as bf16 the GEMM weights (12 C^2 a layer; the tied
  // embedding, norms and biases stay float) cost 2 bytes an element less,
  // about half of them replica 0's: about 12 C^2 L bytes saved a step. The
  // gradients' reduce-scatters are the same float traffic in both runs. A
  // step's count holds the reductions of its backward and the all-gathers
  // that ended the step before.
  {
    const sharded_case c{2, 1, 1, 1, 0, schedule_kind::one_f_one_b, actors::recompute_mode::none};
    auto last_step_bytes = [&](bool bf16) {
      auto o = options_of(c, 3);
      if (bf16) o.model.activations = model::dtype::bf16;
      return last_step_dp_bytes(o, options_of(c, sharding_strategy::optim));
    };
    const auto o = test::layout_test_options(3);
    const double gemm = double(o.model.layers) * 12 * o.model.dim * o.model.dim;
    const double f32 = last_step_bytes(false), bf16 = last_step_bytes(true);
    INFO("float all-gathers " << f32 << " bytes, bf16 " << bf16 << ", GEMM weights " << gemm);
    REQUIRE(f32 - bf16 >= 0.8 * gemm);
    REQUIRE(f32 - bf16 <= 1.2 * gemm);
  }
  // Checkpoints: every replica writes its exact slices (the gathered values
  // of the others are rounded), so a resume continues the run's bits.
  for (auto s : {sharding_strategy::optim, sharding_strategy::optim_grads,
                 sharding_strategy::optim_grads_params}) {
    INFO(partition::sharding_strategy_name(s));
    const sharded_case c{2, 1, 2, 2, 0, schedule_kind::one_f_one_b, actors::recompute_mode::none,
                         1, true};
    const auto whole = losses(options_of(c, 4), options_of(c, s));
    auto dir = std::filesystem::temp_directory_path() /
               ("merak_bf16_gather_ckpt_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    {
      auto o = options_of(c, 4);
      o.save_dir = dir.string();
      actors::parallel_trainer tr(o, options_of(c, s), test::layout_test_corpus());
      for (int k = 0; k < 2; ++k)
        REQUIRE(std::abs(tr.train_step().loss - whole[size_t(k)]) <= 1e-6 * whole[size_t(k)]);
      tr.save();
    }
    auto o = options_of(c, 4);
    o.load = dir.string();
    actors::parallel_trainer tr(o, options_of(c, s), test::layout_test_corpus());
    REQUIRE(tr.step() == 2);
    for (int k = 2; k < 4; ++k) {
      const double got = tr.train_step().loss;
      INFO("step " << k + 1 << ": " << got << " resumed, " << whole[size_t(k)] << " whole");
      REQUIRE(std::abs(got - whole[size_t(k)]) <= 1e-6 * std::abs(whole[size_t(k)]));
    }
    std::filesystem::remove_all(dir);
  }
}

TEST_CASE("parameter shards under sub-pipelined TP gather each bucket once per span",
          "[actors][sharding]") {
  // Each sub-batch runs a span of nodes in turn; the buckets the span reads
  // stay whole until the last sub-batch ran it, so the data-parallel bytes
  // of a step are those of the same run without sub-pipelining.
  auto last_step_bytes = [](int overlap, bool sp) {
    const sharded_case c{2, 2, 1, 2, overlap, schedule_kind::one_f_one_b,
                         actors::recompute_mode::none, 1, false, false, sp};
    return last_step_dp_bytes(options_of(c, 3), options_of(c, sharding_strategy::optim_grads_params));
  };
  std::map<bool, double> bytes;
  for (bool sp : {false, true}) {
    INFO("sequence parallel " << sp);
    const double plain = last_step_bytes(0, sp);
    CHECK(last_step_bytes(1, sp) == plain);
    CHECK(last_step_bytes(2, sp) == plain);
    bytes[sp] = plain;
  }
  // Sequence parallelism moves the same values: its norms and biases fill
  // a bucket of their own, read between every layer's GEMMs and gathered
  // once a pass, and the layers' buckets are not let go of at the norms.
  INFO("dp bytes of a step: " << bytes[false] << " without sequence parallelism, " << bytes[true]
                              << " with");
  CHECK(bytes[true] <= 1.02 * bytes[false]);
}

TEST_CASE("layouts train the same over NCCL's point-to-point matching and rendezvous",
          "[actors][equivalence][nccl_semantics]") {
  // Every TP and data-parallel group of the run matched by posting order,
  // each send done only once its receive is posted (comm/nccl_semantics.hpp):
  // a receive posted out of its peer's send order, or a send waited on
  // before the receive it needs, fails the run instead.
  using rm = actors::recompute_mode;
  struct run_case {
    sharded_case c;
    sharding_strategy s;
  };
  const run_case cases[] = {
      {{2, 1, 1, 2, 0, schedule_kind::one_f_one_b, rm::none}, sharding_strategy::no_shard},
      {{2, 2, 2, 2, 2, schedule_kind::one_f_one_b, rm::stage_aware}, sharding_strategy::no_shard},
      {{1, 2, 1, 2, 2, schedule_kind::one_f_one_b, rm::none, 1, false, false, true},
       sharding_strategy::no_shard},
      {{2, 1, 2, 2, 0, schedule_kind::zb_h1, rm::none}, sharding_strategy::optim},
      {{2, 1, 2, 4, 0, schedule_kind::interleaved, rm::none, 2, true}, sharding_strategy::optim},
      {{2, 2, 1, 2, 1, schedule_kind::one_f_one_b, rm::none, 1, false, false, true},
       sharding_strategy::optim_grads},
      {{2, 2, 2, 2, 2, schedule_kind::one_f_one_b, rm::none}, sharding_strategy::optim_grads_params},
      {{2, 1, 1, 2, 0, schedule_kind::one_f_one_b, rm::none, 1, false, true},
       sharding_strategy::no_shard},
  };
  const int64_t steps = 6;
  for (auto& [c, s] : cases) {
    INFO("dp=" << c.dp << " tp=" << c.tp << " pp=" << c.pp << " m=" << c.m << " "
               << partition::schedule_name(c.kind) << " bf16=" << c.bf16 << " coo=" << c.sparse
               << " sp=" << c.sp << " " << partition::sharding_strategy_name(s));
    const auto o = options_of(c, steps);
    const auto plain = losses(o, options_of(c, s));
    comm::set_nccl_semantics(true);
    std::vector<double> ordered;
    try {
      ordered = losses(o, options_of(c, s));
    } catch (...) {
      comm::set_nccl_semantics(false);
      throw;
    }
    comm::set_nccl_semantics(false);
    REQUIRE(ordered.size() == plain.size());
    for (size_t k = 0; k < plain.size(); ++k)
      REQUIRE(std::abs(ordered[k] - plain[k]) <= 1e-6 * std::abs(plain[k]));
  }
}

namespace {

// Two steps of dp 2 x pp 2 under `sharding` saved, then resumed on one
// device: every step within 1e-5 of the single device's run.
void save_then_resume_single(
    sharding_strategy sharding, bool overlap_param_gather, const std::string& name,
    const std::function<void(const model::checkpoint_reader&)>& inspect = {}) {
  const int64_t steps = 5;
  const auto o = test::layout_test_options(steps);
  const auto reference = test::single_device_losses(o);
  auto dir = std::filesystem::temp_directory_path() / (name + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  {
    auto x = o;
    x.save_dir = dir.string();
    auto par = test::parallel_layout(2, 1, 2, 2, schedule_kind::one_f_one_b, 1);
    par.bucket_bytes = 6000;
    par.sharding = sharding;
    par.overlap_param_gather = overlap_param_gather;
    par.timeout_s = 60;
    actors::parallel_trainer tr(x, par, test::layout_test_corpus());
    for (int s = 0; s < 2; ++s)
      REQUIRE(tr.train_step().loss == Approx(reference[size_t(s)]).epsilon(1e-5));
    tr.save();  // with the last step's all-gathers possibly still out when overlapped
  }
  if (inspect) inspect(model::checkpoint_reader(dir.string()));
  auto x = o;
  x.load = dir.string();
  model::trainer single(x, test::layout_test_corpus());
  REQUIRE(single.step() == 2);
  for (int s = 2; s < steps; ++s)
    CHECK(single.train_step().loss == Approx(reference[size_t(s)]).epsilon(1e-5));
  std::filesystem::remove_all(dir);
}

}  // namespace

TEST_CASE("a checkpoint saved with the all-gather overlapped holds the updated values",
          "[actors][checkpoint][sharding]") {
  save_then_resume_single(sharding_strategy::optim, true, "merak_overlap_ckpt_");
}

TEST_CASE("a checkpoint saved under gradient shards resumes on one device",
          "[actors][checkpoint][sharding]") {
  save_then_resume_single(sharding_strategy::optim_grads, false, "merak_grad_shards_ckpt_");
}

TEST_CASE("a checkpoint saved under parameter shards resumes on one device",
          "[actors][checkpoint][sharding]") {
  // Nothing gathered: every replica wrote its elements' values and moments,
  // no file holds a whole value.
  save_then_resume_single(
      sharding_strategy::optim_grads_params, false, "merak_param_shards_ckpt_",
      [](const model::checkpoint_reader& ckpt) {
        std::set<std::string> files;
        for (auto& r : ckpt.records()) {
          INFO(r.name << " in " << r.file);
          CHECK(r.moment_piece);
          CHECK(r.with_values);
          files.insert(r.file);
        }
        CHECK(files == std::set<std::string>{model::moment_file_name(0, 0, 0),
                                             model::moment_file_name(0, 0, 1),
                                             model::moment_file_name(1, 0, 0),
                                             model::moment_file_name(1, 0, 1)});
      });
}

TEST_CASE(
    "parameter shards load a no_shard checkpoint, and validate on every replica like one device",
    "[actors][checkpoint][sharding]") {
  const int64_t steps = 5;
  auto o = test::layout_test_options(steps);
  o.eval_batches = 3;
  model::trainer single(o, test::layout_test_corpus());
  std::vector<double> reference;
  while (!single.done()) reference.push_back(single.train_step().loss);
  auto dir = std::filesystem::temp_directory_path() /
             ("merak_param_shards_load_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  {
    auto x = o;
    x.save_dir = dir.string();
    auto par = test::parallel_layout(1, 1, 2, 2, schedule_kind::one_f_one_b, 1);
    par.timeout_s = 60;
    actors::parallel_trainer tr(x, par, test::layout_test_corpus());
    for (int s = 0; s < 2; ++s) tr.train_step();
    tr.save();
  }
  auto x = o;
  x.load = dir.string();
  auto par = test::parallel_layout(2, 2, 1, 2, schedule_kind::one_f_one_b, 1);
  par.bucket_bytes = 6000;
  par.sharding = sharding_strategy::optim_grads_params;
  par.timeout_s = 60;
  actors::parallel_trainer tr(x, par, test::layout_test_corpus());
  REQUIRE(tr.step() == 2);
  for (int s = 2; s < steps; ++s)
    CHECK(tr.train_step().loss == Approx(reference[size_t(s)]).epsilon(1e-5));
  CHECK(tr.validation_loss() == Approx(single.validation_loss()).epsilon(1e-5));
  std::filesystem::remove_all(dir);
}

TEST_CASE("sharding combinations the runtime does not run are refused by name",
          "[actors][sharding]") {
  auto refused = [](model::train_options o, actors::parallel_options par, const char* what) {
    INFO(par.str());
    CHECK_THROWS_WITH(actors::parallel_trainer(o, par, test::layout_test_corpus()),
                      Catch::Contains("--data-parallel-sharding-strategy") &&
                          Catch::Contains(partition::sharding_strategy_name(par.sharding)) &&
                          Catch::Contains(what));
  };
  auto par = test::parallel_layout(2, 1, 2, 2, schedule_kind::zb_h1, 1);
  for (auto strategy : {sharding_strategy::optim_grads, sharding_strategy::optim_grads_params}) {
    par.sharding = strategy;
    refused(test::layout_test_options(2), par, "zb-h1");
  }
  par = test::parallel_layout(2, 1, 1, 1, schedule_kind::one_f_one_b, 1);
  par.overlap_param_gather = true;
  CHECK_THROWS_WITH(
      actors::parallel_trainer(test::layout_test_options(2), par, test::layout_test_corpus()),
      Catch::Contains("--overlap-param-gather") && Catch::Contains("--use-distributed-optimizer"));
  // Two key/value heads over four TP shards: each head's slice is held by
  // two shards with partial gradients.
  auto llama = test::layout_test_options(2);
  llama.model.family = model::model_family::llama;
  llama.model.query_groups = 2;
  llama.model.ffn_hidden = 64;
  par = test::parallel_layout(2, 4, 1, 1, schedule_kind::one_f_one_b, 1);
  par.sharding = sharding_strategy::optim_grads;
  refused(llama, par, "--tp 4");
}

TEST_CASE(
    "the distributed optimizer holds 1/d of the optimizer state, gradient shards 1/d of the "
    "gradients, parameter shards 1/d of the values",
    "[actors][sharding][memory]") {
  auto o = test::layout_test_options(1);
  auto held = [&](int dp, int pp, sharding_strategy s) {
    auto par = test::parallel_layout(dp, 1, pp, 1, schedule_kind::one_f_one_b, 1);
    par.bucket_bytes = 6000;
    par.sharding = s;
    actors::parallel_trainer tr(o, par, test::layout_test_corpus());
    tr.train_step();
    return tr.last_memory();
  };
  std::map<int, int64_t> gathered_by_dp;
  for (int dp : {2, 4}) {
    INFO("dp=" << dp);
    const auto plain = held(dp, 1, sharding_strategy::no_shard);
    const auto sharded = held(dp, 1, sharding_strategy::optim);
    // Each replica's moments: 8 bytes a parameter over d, a bucket's slice
    // rounded up by at most one element.
    CHECK(plain.optimizer == 2 * plain.parameters);
    CHECK(std::abs(double(sharded.optimizer) - double(plain.optimizer) / dp) <=
          0.05 * double(plain.optimizer) / dp);
    CHECK(sharded.parameters == plain.parameters);
    CHECK(sharded.gradients == plain.gradients);
    CHECK(sharded.activations_peak == plain.activations_peak);
    CHECK(plain.activations_peak > 0);
    // Gradient shards: 4 bytes a parameter over d where no_shard holds 8
    // (the gradients and the buckets the reducer works on); the optimizer
    // state as under optim.
    const auto grads = held(dp, 1, sharding_strategy::optim_grads);
    CHECK(plain.gradients == 2 * plain.parameters);
    CHECK(std::abs(double(grads.gradients) - double(plain.parameters) / dp) <=
          0.05 * double(plain.parameters) / dp);
    CHECK(grads.optimizer == sharded.optimizer);
    CHECK(grads.parameters == plain.parameters);
    // During the backward a gradient is whole until its bucket leaves, and
    // the bucket's copy with the reducer until it is reduced: above the
    // shards, below no_shard's whole gradients and copies (which hold all
    // of theirs at once, their peak being what stays).
    CHECK(plain.gradients_peak == plain.gradients);
    CHECK(sharded.gradients_peak == sharded.gradients);
    CHECK(grads.gradients_peak > grads.gradients);
    CHECK(grads.gradients_peak < plain.gradients);
    // Parameter shards: each replica holds its slice of the values (4 bytes
    // a parameter over d) and, during the step, the buckets of the node
    // running and of the next one: whatever d, a part of the model (here
    // the 32 KB embedding table beside a block's buckets). Gradients and
    // moments as under optim_grads.
    const auto params = held(dp, 1, sharding_strategy::optim_grads_params);
    const int64_t gathered = params.parameters - plain.parameters / dp;
    gathered_by_dp[dp] = gathered;
    CHECK(gathered >= 256 * 32 * 4);
    CHECK(gathered < plain.parameters / 4);
    CHECK(params.gradients == grads.gradients);
    CHECK(params.optimizer == grads.optimizer);
  }
  // The slices differ from n/d by an element a bucket at most.
  CHECK(std::abs(gathered_by_dp[2] - gathered_by_dp[4]) <= 4 * 64);
}
