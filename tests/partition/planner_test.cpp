// The planner: rules reported by name, plans that respect memory, the
// simulator-backed choice, device files.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "partition/planner.hpp"

using namespace merak;
using namespace merak::partition;

namespace {

plan_request gpu_request(int layers, int dim, int heads, int devices) {
  plan_request r;
  r.model = {.vocab = 50257, .max_seq = 1024, .layers = layers, .dim = dim, .heads = heads};
  r.global_batch = 64;
  r.devices = devices;
  r.nodes = std::max(1, devices / 8);
  r.device = find_device("a100-40gb");
  r.max_micro_batches = 16;
  return r;
}

}  // namespace

TEST_CASE("the chosen plan uses every device and fits the memory budget", "[planner]") {
  auto r = gpu_request(24, 2048, 16, 16);  // about 1.3B parameters
  auto costs = analytic_costs(r.device);
  auto res = search_plans(r, *costs);
  auto& b = res.best;
  CHECK(b.dp * b.tp * b.pp == 16);
  CHECK(int(b.stages.size()) == b.pp);
  CHECK(b.stages.front().first == 0);
  for (size_t s = 0; s + 1 < b.stages.size(); ++s) CHECK(b.stages[s].last == b.stages[s + 1].first);
  for (auto& s : b.stages) CHECK(s.memory_bytes <= int64_t(r.device.memory_bytes));
  CHECK(b.step_time_s > 0);
  CHECK(b.mfu > 0.05);
  CHECK(b.mfu < 1.0);
  for (auto& p : res.runners_up) CHECK(p.step_time_s >= b.step_time_s);
  // No candidate beats the chosen one when scored on its own.
  auto again = evaluate_plan(r, *costs, b.dp, b.tp, b.pp, b.micro_batches, b.schedule, b.recompute,
                             b.tp_overlap);
  CHECK(again.step_time_s == Approx(b.step_time_s));
}

TEST_CASE("a smaller memory budget forces recomputation or more model parallelism", "[planner]") {
  auto r = gpu_request(24, 2048, 16, 8);
  auto costs = analytic_costs(r.device);
  auto roomy = search_plans(r, *costs).best;
  r.memory_budget = int64_t(12e9);
  auto tight = search_plans(r, *costs).best;
  for (auto& s : tight.stages) CHECK(s.memory_bytes <= r.memory_budget);
  int recomputed = 0;
  for (auto& s : tight.stages) recomputed += s.recompute_segments;
  CHECK((recomputed > 0 || tight.tp * tight.pp > roomy.tp * roomy.pp ||
         tight.recompute == recompute_kind::full));
  CHECK(tight.step_time_s >= roomy.step_time_s);
}

TEST_CASE("impossible requests name the rules that rejected every candidate", "[planner]") {
  auto r = gpu_request(24, 2048, 16, 8);
  auto costs = analytic_costs(r.device);
  r.memory_budget = 1000;
  CHECK_THROWS_WITH(search_plans(r, *costs), Catch::Contains("\"memory budget\""));
  r.memory_budget = 0;
  r.tp = 3;
  r.devices = 3;
  CHECK_THROWS_WITH(search_plans(r, *costs), Catch::Contains("tp divides heads and features"));
  CHECK_THROWS_WITH(evaluate_plan(gpu_request(24, 2048, 16, 8), *costs, 2, 2, 2, 3,
                                  schedule_kind::one_f_one_b, recompute_kind::none, 0),
                    Catch::Contains("global batch divides into dp x micro-batches"));
  CHECK_THROWS_WITH(evaluate_plan(gpu_request(24, 2048, 16, 8), *costs, 4, 1, 2, 4,
                                  schedule_kind::shifted, recompute_kind::none, 0),
                    Catch::Contains("shifted needs pp >= 3"));
}

TEST_CASE("the shifted schedule wins over 1F1B with full recomputation in the simulator",
          "[planner]") {
  auto r = gpu_request(32, 2560, 32, 8);
  auto costs = analytic_costs(r.device);
  auto shifted =
      evaluate_plan(r, *costs, 1, 1, 8, 16, schedule_kind::shifted, recompute_kind::full, 0);
  auto base =
      evaluate_plan(r, *costs, 1, 1, 8, 16, schedule_kind::one_f_one_b, recompute_kind::full, 0);
  CHECK(shifted.pipeline_s < base.pipeline_s);
}

TEST_CASE("device files add devices and bad ones are refused by field", "[planner]") {
  auto dir = std::filesystem::temp_directory_path() / ("merak_dev_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto good = (dir / "good.json").string(), bad = (dir / "bad.json").string();
  std::ofstream(good) << R"({"devices": [{"name": "my-gpu", "peak_tflops": 100, "memory_gb": 24,
    "memory_bw_gbs": 900, "intra_bw_gbs": 64, "intra_latency_us": 10, "inter_bw_gbs": 12.5,
    "inter_latency_us": 20, "devices_per_node": 4}]})";
  std::ofstream(bad) << R"({"devices": [{"name": "x", "peak_tflops": "fast"}]})";
  auto d = find_device("MY-GPU", good);
  CHECK(d.peak_flops == Approx(100e12));
  CHECK(d.devices_per_node == 4);
  CHECK_THROWS_WITH(find_device("x", bad),
                    Catch::Contains("bad.json") && Catch::Contains("peak_tflops"));
  CHECK_THROWS_WITH(find_device("tpu-v9"), Catch::Contains("a100-40gb"));
  std::filesystem::remove_all(dir);
}
