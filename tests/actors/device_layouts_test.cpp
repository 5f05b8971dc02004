// Parallel layouts with every stage actor's parameters and activations on a
// device (or spread over four), checked without a GPU on the stand-in device
// (tests/model/stand_in_device.hpp): whatever in the actors touched device
// memory from the host (gradient buckets, TP sums, tied weights, summed
// gradients, shard files) would fault; and since the stand-in computes with
// the CPU kernels, each layout must equal the same layout on the CPU bit for
// bit (core lending off on both: the same thread counts). The device runs'
// groups carry NCCL's point-to-point semantics (comm/nccl_semantics.hpp),
// and their TP sums, data-parallel gradient buckets and the sharded
// optimizers' all-gathers of updated values go through the device-collective
// seam (comm/device_collectives.hpp) to the stand-in's
// collectives (tests/comm/stand_in_collectives.hpp), where NCCL's would run
// on a GPU.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "actors/parallel_trainer.hpp"
#include "comm/device_collectives.hpp"
#include "comm/nccl_semantics.hpp"
#include "core/error.hpp"
#include "model/trainer.hpp"
#include "tests/actors/layout_options.hpp"
#include "tests/comm/stand_in_collectives.hpp"
#include "tests/comm/stand_in_links.hpp"
#include "tests/model/stand_in_device.hpp"
#include "tests/model/test_util.hpp"

using namespace merak;
using merak::partition::schedule_kind;

namespace {

struct layout_case {
  int dp, tp, pp, m, overlap;
  schedule_kind kind;
  int chunks;
  model::dtype activations;
  partition::sharding_strategy sharding = partition::sharding_strategy::no_shard;
  bool sequence_parallel = false;
};

}  // namespace

TEST_CASE("parallel layouts on a device equal the same layouts on the CPU", "[device]") {
  const auto f32 = model::dtype::f32, bf16 = model::dtype::bf16;
  const layout_case cases[] = {
      {1, 1, 2, 4, 0, schedule_kind::one_f_one_b, 1, f32},
      {2, 1, 1, 2, 0, schedule_kind::one_f_one_b, 1, f32},
      {1, 2, 1, 1, 1, schedule_kind::one_f_one_b, 1, f32},
      {2, 2, 2, 2, 2, schedule_kind::shifted, 1, f32},
      {1, 1, 2, 4, 0, schedule_kind::zb_h1, 1, f32},
      {1, 1, 2, 4, 0, schedule_kind::interleaved, 2, f32},
      {1, 2, 2, 4, 0, schedule_kind::one_f_one_b, 1, bf16},
      {2, 1, 1, 2, 0, schedule_kind::one_f_one_b, 1, f32, partition::sharding_strategy::optim},
      {2, 2, 1, 2, 1, schedule_kind::one_f_one_b, 1, bf16, partition::sharding_strategy::optim},
      {2, 2, 2, 2, 2, schedule_kind::one_f_one_b, 1, f32,
       partition::sharding_strategy::optim_grads},
      {2, 1, 2, 2, 0, schedule_kind::one_f_one_b, 1, bf16,
       partition::sharding_strategy::optim_grads_params},
      {1, 2, 1, 2, 1, schedule_kind::one_f_one_b, 1, f32, partition::sharding_strategy::no_shard,
       true},
      {2, 2, 1, 2, 0, schedule_kind::one_f_one_b, 1, bf16,
       partition::sharding_strategy::optim_grads_params, true},
  };
  for (auto& c : cases) {
    INFO("dp=" << c.dp << " tp=" << c.tp << " pp=" << c.pp << " m=" << c.m << " "
               << partition::schedule_name(c.kind) << " " << model::dtype_name(c.activations)
               << " " << partition::sharding_strategy_name(c.sharding)
               << (c.sequence_parallel ? " sequence-parallel" : ""));
    auto par = test::parallel_layout(c.dp, c.tp, c.pp, c.m, c.kind, c.chunks);
    par.sharding = c.sharding;
    par.sequence_parallel = c.sequence_parallel;
    par.tp_overlap = c.overlap;
    par.bucket_bytes = 8192;
    par.lend_cores = false;
    par.timeout_s = 60;
    auto o = test::layout_test_options(5);  // 4 here, the fifth after a resume
    o.model.activations = c.activations;
    auto dir = std::filesystem::temp_directory_path() /
               ("merak-device-layout-" + std::to_string(::getpid()));
    o.save_dir = dir.string();
    actors::parallel_trainer on_cpu(o, par, test::layout_test_corpus());
    auto od = o;
    od.where = model::device::cuda(0);
    // Every other case spreads the actors over the stand-in's four devices
    // (activations and gradients then cross devices inside the process).
    auto pd = par;
    pd.spread_over_devices = (&c - cases) % 2 == 1;
    INFO((pd.spread_over_devices ? "spread over cuda:0-3" : "all on cuda:0"));
    // The device run's TP and data-parallel groups with NCCL's matching and
    // rendezvous (comm/nccl_semantics.hpp), as NCCL would carry them.
    comm::set_nccl_semantics(true);
    std::optional<actors::parallel_trainer> made;
    try {
      made.emplace(od, pd, test::layout_test_corpus());
    } catch (...) {
      comm::set_nccl_semantics(false);
      throw;
    }
    comm::set_nccl_semantics(false);
    auto& on_dev = *made;
    const long calls = test::stand_in_collective_calls(), gathers = test::stand_in_allgathers(),
               bf16_gathers = test::stand_in_bf16_allgathers();
    for (int s = 0; s < 4; ++s) {
      auto a = on_cpu.train_step(), b = on_dev.train_step();
      INFO("step " << s + 1 << ": " << a.loss << " vs " << b.loss);
      REQUIRE(a.loss == b.loss);
      REQUIRE(a.grad_norm == b.grad_norm);
    }
    // TP sums of device tensors and gradient buckets (summed or
    // reduce-scattered) went through the device collectives.
    if (c.tp > 1 || c.dp > 1) CHECK(test::stand_in_collective_calls() > calls);
    // The sharded strategies' updated values are all-gathered there too.
    if (c.dp > 1 && c.sharding != partition::sharding_strategy::no_shard) {
      CHECK(test::stand_in_allgathers() > gathers);
      // A bf16 run gathers its updated values as bf16 on the device too.
      if (c.activations == bf16 && !c.sequence_parallel)
        CHECK(test::stand_in_bf16_allgathers() > bf16_gathers);
    }
    CHECK(on_dev.validation_loss() == on_cpu.validation_loss());
    // The device run's shards resume on the single device (CPU).
    const std::string saved = on_dev.save();
    auto resume = test::layout_test_options(5);
    resume.model.activations = c.activations;
    resume.load = saved;
    model::trainer single(resume, test::layout_test_corpus());
    CHECK(single.step() == 4);
    if (c.sharding != partition::sharding_strategy::no_shard) {
      // Sharded state resumed onto the device: the fifth step as the CPU's.
      auto back = od;
      back.load = saved;
      actors::parallel_trainer again(back, pd, test::layout_test_corpus());
      REQUIRE(again.step() == 4);
      CHECK(again.train_step().loss == on_cpu.train_step().loss);
    }
    std::filesystem::remove_all(dir);
  }
}

TEST_CASE("device collectives turned off: TP sums of device tensors through host copies",
          "[device]") {
  ::setenv("MERAK_DEVICE_COLLECTIVES", "0", 1);
  auto par = test::parallel_layout(1, 2, 1, 1, schedule_kind::one_f_one_b, 1);
  par.tp_overlap = 1;
  par.lend_cores = false;
  par.timeout_s = 60;
  auto o = test::layout_test_options(3);
  actors::parallel_trainer on_cpu(o, par, test::layout_test_corpus());
  auto od = o;
  od.where = model::device::cuda(0);
  const long made = test::stand_in_collectives_made(), calls = test::stand_in_collective_calls();
  actors::parallel_trainer on_dev(od, par, test::layout_test_corpus());
  for (int s = 0; s < 2; ++s) REQUIRE(on_cpu.train_step().loss == on_dev.train_step().loss);
  ::unsetenv("MERAK_DEVICE_COLLECTIVES");
  CHECK(test::stand_in_collectives_made() == made);
  CHECK(test::stand_in_collective_calls() == calls);
}

TEST_CASE("device collectives that cannot be made fail the job, naming the member", "[device]") {
  // The second member of every group refuses, as NCCL refuses a
  // communicator; the job must end with that reason, not hang.
  comm::register_device_collectives(
      model::device::kind::cuda,
      [](comm::transport& group, model::device d, comm::tag_t,
         const comm::device_collectives_options&) -> std::unique_ptr<comm::device_collectives> {
        if (group.rank() == 1)
          throw error(fmt::format("stand-in member 1 of {} on {}: refused", group.size(), d.str()));
        return nullptr;
      });
  auto par = test::parallel_layout(1, 2, 1, 1, schedule_kind::one_f_one_b, 1);
  par.lend_cores = false;
  par.timeout_s = 20;
  auto o = test::layout_test_options(2);
  o.where = model::device::cuda(0);
  bool failed = false;
  try {
    actors::parallel_trainer on_dev(o, par, test::layout_test_corpus());
    on_dev.train_step();
  } catch (const std::exception& e) {
    failed = true;
    CHECK_THAT(e.what(), Catch::Contains("stand-in member 1 of 2 on cuda:0: refused"));
  }
  CHECK(failed);
  test::register_stand_in_collectives();
}

int main(int argc, char* argv[]) {
  test::register_stand_in_device();
  test::register_stand_in_collectives();
  test::register_stand_in_links();  // the channel's cases (tests/comm/device_links_on_stand_in.cpp)
  return Catch::Session().run(argc, argv);
}
