// The planner: rules reported by name, plans that respect memory, the
// simulator-backed choice, device files.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "core/error.hpp"
#include "partition/planner.hpp"
#include "partition/simulator.hpp"

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

TEST_CASE("whole-layer recomputed segments are chosen only where half layers do not fit",
          "[planner][recompute]") {
  auto r = gpu_request(24, 2048, 16, 8);
  r.recomputes = {recompute_kind::full};
  r.recompute_every_stage = true;  // the last stage too, as Megatron-LM does
  r.search_recompute_layers = true;
  auto costs = analytic_costs(r.device);
  // Room enough: the same work either way, and half layers, the simpler plan.
  const plan roomy = search_plans(r, *costs).best;
  CHECK(roomy.recompute_layers == 0);
  // Between the two plans' largest stages, only whole layers fit.
  r.dp = roomy.dp;
  r.tp = roomy.tp;
  r.pp = roomy.pp;
  r.micro_batches = roomy.micro_batches;
  r.schedules = {roomy.schedule};
  auto largest = [](const plan& p) {
    int64_t m = 0;
    for (auto& st : p.stages) m = std::max(m, st.memory_bytes);
    return m;
  };
  r.search_recompute_layers = false;
  r.recompute_layers = 1;
  const plan layers = search_plans(r, *costs).best;
  REQUIRE(largest(layers) < largest(roomy));
  r.memory_budget = (largest(layers) + largest(roomy)) / 2;
  r.recompute_layers = 0;
  r.search_recompute_layers = true;
  const plan tight = search_plans(r, *costs).best;
  CHECK(tight.recompute_layers == 1);
  CHECK(largest(tight) <= r.memory_budget);
}

TEST_CASE("a given micro-batch count above the search's bound is scored as given", "[planner]") {
  // Megatron-LM's runs with --micro-batch-size 1 and a global batch of
  // hundreds: the count is fixed, not searched.
  auto r = gpu_request(4, 512, 8, 8);
  r.global_batch = 280;
  r.micro_batches = 70;
  r.tp = 2;
  r.pp = 2;
  r.max_micro_batches = 16;
  auto costs = analytic_costs(r.device);
  const auto res = search_plans(r, *costs);
  CHECK(res.best.micro_batches == 70);
  CHECK(res.best.dp == 2);
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
  // Each field in its range, named with its value (an int never wraps).
  auto field = [&](const std::string& key, const std::string& value) {
    std::string text = R"({"devices": [{"name": "my-gpu", "peak_tflops": 100, "memory_gb": 24,
      "memory_bw_gbs": 900, "intra_bw_gbs": 64, "intra_latency_us": 10, "inter_bw_gbs": 12.5,
      "inter_latency_us": 20, "devices_per_node": 4}]})";
    const size_t at = text.find("\"" + key + "\": ") + key.size() + 4;
    text.replace(at, text.find_first_of(",}", at) - at, value);
    std::ofstream(bad) << text;
  };
  field("devices_per_node", "1e12");
  CHECK_THROWS_WITH(find_device("my-gpu", bad),
                    Catch::Contains("bad.json") && Catch::Contains("'devices_per_node' is 1000000000000") &&
                        Catch::Contains("an integer from 1 to 1048576"));
  field("inter_latency_us", "-20");
  CHECK_THROWS_WITH(find_device("my-gpu", bad), Catch::Contains("'inter_latency_us' is -20"));
  field("memory_gb", "1e300");
  CHECK_THROWS_WITH(find_device("my-gpu", bad), Catch::Contains("'memory_gb' is 1e+300"));
  field("devices_per_node", "2.5");
  CHECK_THROWS_WITH(find_device("my-gpu", bad), Catch::Contains("'devices_per_node' is 2.5"));
  std::filesystem::remove_all(dir);
}

namespace {

// A profile of made-up rates (seconds per FLOP), as profile_cpu would give.
cpu_profile fake_profile(int64_t rows, double scale) {
  cpu_profile p;
  p.rows = rows;
  p.threads = 1;
  p.contention = 1.2;
  p.optimizer_s_per_param = 2e-9;
  for (const char* k :
       {"embedding", "layernorm", "attention", "linear", "gelu", "residual", "cross_entropy"})
    p.seconds_per_flop[k] = {scale * 1e-11, scale * 2e-11};
  p.seconds_per_flop["gelu"] = {scale * 3e-10, scale * 3e-10};
  p.matmul_flops = 1.0 / (scale * 1e-11);
  return p;
}

void same_choice(const plan_request& r, const cost_model& costs) {
  plan_request ex = r;
  ex.exhaustive = true;
  auto fast = search_plans(r, costs), all = search_plans(ex, costs);
  INFO("devices " << r.devices << ": pruned " << fast.best.str() << " exhaustive "
                  << all.best.str());
  CHECK(all.simulated == all.evaluated);
  CHECK(fast.evaluated == all.evaluated);
  CHECK(fast.best.str() == all.best.str());
  CHECK(fast.best.step_time_s == all.best.step_time_s);
  REQUIRE(fast.runners_up.size() == all.runners_up.size());
  for (size_t i = 0; i < all.runners_up.size(); ++i)
    CHECK(fast.runners_up[i].str() == all.runners_up[i].str());
}

}  // namespace

TEST_CASE("the pruned search picks the plan and runners-up of the exhaustive one", "[planner]") {
  for (int devices : {4, 8, 16}) {
    auto r = gpu_request(12, 768, 12, devices);
    r.global_batch = 32;
    same_choice(r, *analytic_costs(r.device));
  }
  {  // a tight budget: recomputation and more model parallelism matter
    auto r = gpu_request(24, 2048, 16, 8);
    r.memory_budget = int64_t(12e9);
    same_choice(r, *analytic_costs(r.device));
  }
  // Actor devices sharing two cores, costs from profiles of two shapes.
  for (int devices : {2, 3, 4, 6}) {
    plan_request r;
    r.model = {.vocab = 256, .max_seq = 64, .layers = 6, .dim = 96, .heads = 6};
    r.global_batch = 12;
    r.devices = devices;
    r.device = find_device("cpu");
    r.max_micro_batches = 12;
    auto costs = measured_costs({fake_profile(1, 1.5), fake_profile(4, 1.0)}, 64, 2);
    same_choice(r, *costs);
    // and the bound prunes something once there are enough candidates
    if (devices == 6) CHECK(search_plans(r, *costs).simulated < search_plans(r, *costs).evaluated);
  }
}

TEST_CASE("MFU is measured against the fastest rate a profile saw, never above 100%", "[planner]") {
  // A backward pass faster per FLOP than the linear layers' forward, and
  // attention faster still: against the forward linear rate alone, the
  // plan's MFU came out above 1.
  cpu_profile p = fake_profile(2, 1.0);
  for (auto& [kind, r] : p.seconds_per_flop) r.second = 0.4e-11;  // backward: 5e11 FLOP/s
  p.seconds_per_flop["attention"] = {0.3e-11, 0.25e-11};
  CHECK(peak_flops_of(p) == Approx(8e11));
  plan_request r;
  r.model = {.vocab = 256, .max_seq = 64, .layers = 3, .dim = 96, .heads = 4};
  r.global_batch = 8;
  r.devices = 2;
  r.device = find_device("cpu");
  auto costs = measured_costs({p}, 64, 2);
  auto found = search_plans(r, *costs);
  CHECK(found.best.mfu > 0);
  CHECK(found.best.mfu <= 1);
  for (auto& x : found.runners_up) CHECK(x.mfu <= 1);
  // The same plan against the forward linear rate: above 100%.
  CHECK(found.best.mfu * peak_flops_of(p) / p.matmul_flops > 1);
}

TEST_CASE("devices sharing cores: processor sharing in the simulator", "[planner]") {
  // Jobs on shared cores: the shortest ends first.
  CHECK(shared_makespan({1, 3}, 1, 1, 1.0) == Approx(4.0));
  CHECK(shared_makespan({1, 1, 1, 1}, 1, 2, 1.0) == Approx(2.0));
  CHECK(shared_makespan({1, 1}, 1, 2, 1.5) == Approx(1.5));  // both cores busy: contention
  CHECK(shared_makespan({1, 1}, 1, 0, 1.5) == Approx(1.0));  // no sharing
  core_sharing cs{2, 1, 1, 1.5};
  CHECK(cs.speed(1) == Approx(1.0));
  CHECK(cs.speed(2) == Approx(1 / 1.5));
  CHECK(cs.speed(4) == Approx(0.5 / 1.5));
  // One core under a 1F1B pipeline: never idle while any stage works, so the
  // step is the total work; with no sharing the stages overlap.
  auto pol = make_policies(schedule_kind::one_f_one_b, 4, 8);
  auto no_delay = [](int, int, int) { return 0.0; };
  auto one_core = simulate_pipeline(pol, uniform_costs(1, 2, 1), no_delay, {1, 1, 1, 1.0});
  auto own = simulate_pipeline(pol, uniform_costs(1, 2, 1), no_delay);
  CHECK_FALSE(one_core.deadlocked);
  CHECK(one_core.makespan == Approx(4 * 8 * 3.0));
  CHECK(own.makespan < one_core.makespan);
  // Same policy, same emergent order of each stage as with dedicated cores
  // only when nothing overlaps; the ops still all run.
  for (int s = 0; s < 4; ++s) CHECK(one_core.stages[s].size() == own.stages[s].size());
  // Enough cores: sharing changes nothing.
  auto many = simulate_pipeline(pol, uniform_costs(1, 2, 1), no_delay, {64, 1, 1, 1.0});
  CHECK(many.makespan == Approx(own.makespan));
}

TEST_CASE("a CPU profile is measured once and read back from its cache", "[planner]") {
  auto dir = std::filesystem::temp_directory_path() / ("merak_prof_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto file = (dir / "profile.json").string();
  model::gpt_config cfg{.vocab = 64, .max_seq = 16, .layers = 3, .dim = 32, .heads = 2};
  auto a = profile_cpu(cfg, 2, 1, 2, file);
  CHECK(std::filesystem::exists(file));
  CHECK(a.rows == 2);
  CHECK(a.contention >= 1.0);
  CHECK(a.optimizer_s_per_param > 0);
  CHECK(a.matmul_flops > 0);
  REQUIRE(a.seconds_per_flop.count("linear") == 1);
  auto b = profile_cpu(cfg, 2, 1, 2, file);  // from the cache: the same numbers
  CHECK(b.seconds_per_flop == a.seconds_per_flop);
  CHECK(b.contention == a.contention);
  CHECK(b.optimizer_s_per_param == a.optimizer_s_per_param);
  // A damaged cache is measured again, not an error.
  std::ofstream(file, std::ios::trunc) << "{not json";
  auto c = profile_cpu(cfg, 2, 1, 2, file);
  CHECK(c.seconds_per_flop.count("linear") == 1);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a plan carries its placement: one process per device, TP groups inside a host",
          "[planner]") {
  auto r = gpu_request(24, 2048, 16, 16);  // 2 nodes of 8
  auto costs = analytic_costs(r.device);
  auto res = search_plans(r, *costs);
  std::vector<plan> plans = res.runners_up;
  plans.push_back(res.best);
  for (auto& p : plans) {
    REQUIRE(p.place.world == 16);
    REQUIRE(p.host_of_rank.size() == 16u);
    CHECK(p.place.dp == p.dp);
    CHECK(p.place.pp == p.pp);
    CHECK(p.place.tp == p.tp);
    validate_placement(p.place);
    for (int d = 0; d < p.dp; ++d)
      for (int s = 0; s < p.pp; ++s)
        for (int t = 1; t < p.tp; ++t) {
          const int r0 = p.place.rank(d, s, 0), rt = p.place.rank(d, s, t);
          CHECK(rt == r0 + t);  // adjacent ranks
          CHECK(p.host_of_rank[size_t(rt)] == p.host_of_rank[size_t(r0)]);
        }
  }
  // The same plan over 2 processes (8 actors each), and on one.
  r.processes = 2;
  auto two = search_plans(r, *costs).best;
  CHECK(two.place.world == 2);
  CHECK(two.place.actors_of(0).size() == 8u);
  r.processes = 1;
  CHECK(search_plans(r, *costs).best.place.single_process());
  r.processes = 17;
  CHECK_THROWS_AS(search_plans(r, *costs), merak::error);
}
