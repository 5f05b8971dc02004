#include "bench/parallel_bench.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include <unistd.h>

#include "actors/parallel_trainer.hpp"
#include "bench/codec_bench.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "job/launcher.hpp"
#include "model/gemm.hpp"
#include "model/trainer.hpp"
#include "partition/device.hpp"
#include "partition/planner.hpp"
#include "partition/schedule.hpp"

namespace merak::bench {
namespace {

bool parse_on_off(const std::string& layout, const std::string& key, const std::string& v) {
  if (v == "on") return true;
  if (v == "off") return false;
  fail("layout '{}': {} must be on or off (got '{}')", layout, key, v);
}

// A layout, and how many processes run it (1: inside the benchmark).
struct layout_spec {
  actors::parallel_options par;
  int procs = 1;
  std::string in_one_process;  // the same layout without procs=
};

layout_spec parse_layout(const std::string& layout) {
  layout_spec spec;
  actors::parallel_options& p = spec.par;
  size_t at = 0;
  while (at < layout.size()) {
    size_t end = layout.find(',', at);
    if (end == std::string::npos) end = layout.size();
    std::string item = layout.substr(at, end - at);
    at = end + 1;
    auto eq = item.find('=');
    if (eq == std::string::npos) fail("layout '{}': '{}' is not key=value", layout, item);
    std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    auto number = [&] {
      try {
        size_t used = 0;
        int x = std::stoi(v, &used);
        if (used == v.size()) return x;
      } catch (const std::exception&) {
      }
      fail("layout '{}': {} must be an integer (got '{}')", layout, k, v);
    };
    if (k == "dp")
      p.dp = number();
    else if (k == "tp")
      p.tp = number();
    else if (k == "pp")
      p.pp = number();
    else if (k == "m")
      p.micro_batches = number();
    else if (k == "overlap")
      p.tp_overlap = number();
    else if (k == "schedule")
      p.schedule = partition::parse_schedule(v);
    else if (k == "chunks")
      p.chunks = number();
    else if (k == "recompute")
      p.recompute = partition::parse_recompute_kind(v);
    else if (k == "recompute_layers") {
      p.recompute_layers = number();
      if (p.recompute_layers < 1)
        fail("layout '{}': recompute_layers must be at least 1 (got {})", layout,
             p.recompute_layers);
    }
    else if (k == "lend")
      p.lend_cores = parse_on_off(layout, k, v);
    else if (k == "rings")
      p.shared_rings = parse_on_off(layout, k, v);
    else if (k == "sp")
      p.sequence_parallel = parse_on_off(layout, k, v);
    else if (k == "param_gather")
      p.overlap_param_gather = parse_on_off(layout, k, v);
    else if (k == "sharding")
      p.sharding = partition::parse_sharding_strategy(v);
    else if (k == "bucket_kb") {
      const int kb = number();
      if (kb < 1) fail("layout '{}': bucket_kb must be at least 1 (got {})", layout, kb);
      p.bucket_bytes = int64_t(kb) * 1024;
    } else if (k == "procs")
      spec.procs = number();
    else
      fail(
          "layout '{}': unknown key '{}' (dp, tp, pp, m, schedule, chunks, recompute, "
          "recompute_layers, overlap, sp, sharding, param_gather, bucket_kb, lend, rings, procs)",
          layout, k);
    if (k != "procs" && k != "rings")
      spec.in_one_process += (spec.in_one_process.empty() ? "" : ",") + item;
  }
  if (spec.procs < 1) fail("layout '{}': procs must be at least 1", layout);
  if (p.schedule == partition::schedule_kind::interleaved &&
      layout.find("chunks=") == std::string::npos)
    p.chunks = 2;  // as merak train's default
  return spec;
}

// Runs `merak train` as spec.procs processes of one job (the local
// launcher) on the corpus file, and returns the median tokens/s of the
// measured steps from its metrics.
double measure_processes(const layout_spec& spec, const parallel_bench_options& options,
                         const std::string& data, const std::string& metrics) {
  const auto& p = spec.par;
  job::launch_options lo;
  lo.procs = spec.procs;
  lo.timeout = std::chrono::minutes(30);
  auto num = [](auto x) { return std::to_string(x); };
  lo.argv = {job::self_executable(),
             "train",
             "--data",
             data,
             "--layers",
             num(options.model.layers),
             "--dim",
             num(options.model.dim),
             "--heads",
             num(options.model.heads),
             "--seq",
             num(options.model.max_seq),
             "--vocab",
             num(options.model.vocab),
             "--batch",
             num(options.batch),
             "--precision",
             options.model.activations == model::dtype::bf16 ? "bf16" : "fp32",
             "--steps",
             num(options.warmup_steps + options.steps),
             "--seed",
             num(options.seed),
             "--val-fraction",
             "0.1",
             "--eval-batches",
             "1",
             "--dp",
             num(p.dp),
             "--tp",
             num(p.tp),
             "--pp",
             num(p.pp),
             "--micro-batches",
             num(p.micro_batches),
             "--tp-overlap",
             num(p.tp_overlap),
             "--schedule",
             std::string(partition::schedule_name(p.schedule)),
             "--chunks",
             num(p.chunks),
             "--recompute",
             std::string(partition::recompute_kind_name(p.recompute)),
             "--lend-cores",
             p.lend_cores ? "on" : "off",
             "--shared-rings",
             p.shared_rings ? "on" : "off",
             "--data-parallel-sharding-strategy",
             std::string(partition::sharding_strategy_name(p.sharding)),
             "--log-level",
             "warn",
             "--metrics",
             metrics};
  if (p.sequence_parallel) lo.argv.push_back("--sequence-parallel");
  if (p.overlap_param_gather) lo.argv.push_back("--overlap-param-gather");
  if (p.recompute_layers > 0) {
    lo.argv.push_back("--recompute-num-layers");
    lo.argv.push_back(num(p.recompute_layers));
  }
  lo.argv.push_back("--bucket-mb");
  lo.argv.push_back(fmt::format("{}", double(p.bucket_bytes) / 1048576.0));
  auto res = job::launch_local(lo);
  if (!res.ok()) fail("bench parallel: {} processes: {}", spec.procs, res.message);
  std::ifstream in(metrics);
  std::vector<double> tps;
  std::string line;
  for (int step = 1; std::getline(in, line); ++step)
    if (step > options.warmup_steps) tps.push_back(nlohmann::json::parse(line).at("tokens_per_s"));
  if (int(tps.size()) != options.steps)
    fail("bench parallel: {} processes wrote {} measured steps, not {}", spec.procs, tps.size(),
         options.steps);
  return bench::median(tps);
}

// Median tokens/s of the measured steps.
template <typename Trainer>
double measure(Trainer& tr, const parallel_bench_options& options) {
  for (int i = 0; i < options.warmup_steps; ++i) tr.train_step();
  std::vector<double> tps;
  for (int i = 0; i < options.steps; ++i) tps.push_back(tr.train_step().tokens_per_s);
  return bench::median(tps);
}

}  // namespace

nlohmann::json run_parallel_bench(const parallel_bench_options& options) {
  if (options.rounds < 1 || options.steps < 1) fail("--rounds and --steps must be at least 1");
  std::vector<std::string> layouts = options.layouts;
  if (layouts.empty()) layouts = {"pp=2,m=8", "dp=2"};
  std::vector<layout_spec> specs;
  bool any_procs = false;
  for (auto& l : layouts) {
    specs.push_back(parse_layout(l));
    if (specs.back().procs == 1) specs.back().par.validate(options.batch);
    any_procs = any_procs || specs.back().procs > 1;
  }
  const int T = options.model.max_seq;
  std::vector<uint8_t> bytes(size_t(std::max(1 << 20, 40 * T)));
  rng r(options.seed, 0xB0B);
  for (auto& b : bytes) b = uint8_t(r.below(uint64_t(std::min(options.model.vocab, 256))));
  // Layouts run as processes read the same bytes from a file.
  std::string dir;
  if (any_procs) {
    dir = (std::filesystem::temp_directory_path() / ("merak-bench-" + std::to_string(::getpid())))
              .string();
    std::filesystem::create_directories(dir);
    std::ofstream f(dir + "/corpus.txt", std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    if (!f) fail("bench parallel: cannot write {}/corpus.txt", dir);
  }
  struct remove_dir {
    std::string d;
    ~remove_dir() {
      std::error_code ec;
      if (!d.empty()) std::filesystem::remove_all(d, ec);
    }
  } cleanup{dir};
  model::text_corpus corpus(std::move(bytes), T, 0.1, "random");
  model::train_options t;
  t.model = options.model;
  t.batch = options.batch;
  t.steps = options.warmup_steps + options.steps;
  t.seed = options.seed;
  t.eval_batches = 1;

  nlohmann::json rounds = nlohmann::json::array();
  std::vector<std::vector<double>> ratios(layouts.size()), vs_one(layouts.size());
  std::vector<double> all_ratios;
  for (int round = 0; round < options.rounds; ++round) {
    model::set_compute_threads(1);
    double base;
    {
      model::trainer single(t, corpus);
      base = measure(single, options);
    }
    // The machine's own two-thread (or more) scaling, for reference: the
    // same single-device step with every core in each operator.
    model::set_compute_threads(int(std::thread::hardware_concurrency()));
    double all_threads;
    {
      model::trainer single(t, corpus);
      all_threads = measure(single, options);
    }
    all_ratios.push_back(all_threads / base);
    nlohmann::json row = {{"single_1_thread_tokens_per_s", base},
                          {"single_all_threads_tokens_per_s", all_threads},
                          {"single_all_threads_ratio", all_threads / base}};
    for (size_t i = 0; i < layouts.size(); ++i) {
      double tps;
      if (specs[i].procs > 1) {
        tps = measure_processes(specs[i], options, dir + "/corpus.txt", dir + "/metrics.jsonl");
      } else {
        model::set_compute_threads(1);  // the stages set their own
        actors::parallel_trainer tr(t, specs[i].par, corpus);
        tps = measure(tr, options);
      }
      ratios[i].push_back(tps / base);
      row[layouts[i]] = {{"tokens_per_s", tps}, {"ratio", tps / base}};
    }
    // A layout run as processes against the same layout inside one process.
    for (size_t i = 0; i < layouts.size(); ++i)
      if (specs[i].procs > 1 && row.contains(specs[i].in_one_process)) {
        double vs = row[layouts[i]]["tokens_per_s"].get<double>() /
                    row[specs[i].in_one_process]["tokens_per_s"].get<double>();
        row[layouts[i]]["vs_one_process"] = vs;
        vs_one[i].push_back(vs);
      }
    rounds.push_back(std::move(row));
  }
  nlohmann::json summary = nlohmann::json::object();
  for (size_t i = 0; i < layouts.size(); ++i) {
    auto v = ratios[i];
    std::sort(v.begin(), v.end());
    summary[layouts[i]] = {
        {"ratio_median", bench::median(v)}, {"ratio_min", v.front()}, {"ratio_max", v.back()}};
    if (auto w = vs_one[i]; !w.empty()) {
      std::sort(w.begin(), w.end());
      summary[layouts[i]]["vs_one_process_median"] = bench::median(w);
      summary[layouts[i]]["vs_one_process_min"] = w.front();
      summary[layouts[i]]["vs_one_process_max"] = w.back();
    }
  }
  std::sort(all_ratios.begin(), all_ratios.end());
  summary["single device, all threads"] = {{"ratio_median", bench::median(all_ratios)},
                                           {"ratio_min", all_ratios.front()},
                                           {"ratio_max", all_ratios.back()}};
  return {{"benchmark", "parallel"},
          {"cores", int(std::thread::hardware_concurrency())},
          {"layers", options.model.layers},
          {"dim", options.model.dim},
          {"heads", options.model.heads},
          {"seq", T},
          {"batch", options.batch},
          {"steps", options.steps},
          {"warmup_steps", options.warmup_steps},
          {"baseline", "single device, 1 thread, whole batch"},
          {"rounds", std::move(rounds)},
          {"ratio_to_1_thread", std::move(summary)}};
}

nlohmann::json run_memory_bench(const parallel_bench_options& options) {
  if (options.layouts.empty()) fail("bench memory: give at least one --layout");
  const int T = options.model.max_seq;
  std::vector<uint8_t> bytes(size_t(std::max(1 << 16, 40 * T)));
  rng r(options.seed, 0xB0B);
  for (auto& b : bytes) b = uint8_t(r.below(uint64_t(std::min(options.model.vocab, 256))));
  model::text_corpus corpus(std::move(bytes), T, 0.1, "random");
  model::train_options t;
  t.model = options.model;
  t.batch = options.batch;
  t.steps = 2;  // memory from the first step, traffic from the second
  t.seed = options.seed;
  t.eval_batches = 1;
  auto as_json = [](int64_t p, int64_t g, int64_t o, int64_t a) {
    return nlohmann::json{{"parameters", p}, {"gradients", g}, {"optimizer", o},
                          {"activations_peak", a}};
  };
  nlohmann::json rows = nlohmann::json::array();
  for (auto& l : options.layouts) {
    const auto spec = parse_layout(l);
    if (spec.procs > 1) fail("bench memory: layout '{}': runs in one process (no procs=)", l);
    const auto& par = spec.par;
    par.validate(options.batch);
    actors::memory_use got;
    uint64_t dp_bytes = 0;
    partition::plan_request req;
    {
      model::set_compute_threads(1);
      actors::parallel_trainer tr(t, par, corpus);
      tr.train_step();
      got = tr.last_memory();
      // A step's data-parallel traffic holds the all-gathers that ended the
      // step before: the second step's is the steady one.
      if (par.dp > 1) {
        tr.train_step();
        dp_bytes = tr.last_comm().dp_bytes_per_rank;
      }
      req.stage_bounds = tr.stage_bounds();  // the same (virtual) stages
    }
    req.model = options.model;
    req.global_batch = options.batch;
    req.devices = par.dp * par.tp * par.pp;
    req.processes = 1;
    req.device = partition::find_device("cpu");
    req.memory_budget = int64_t(1) << 50;  // the prediction, whatever it is
    // Bytes do not depend on op times: nominal rates, no CPU profile.
    req.device.peak_flops = 1e11;
    req.device.memory_bw = 1e10;
    req.chunks = par.chunks;
    req.sharding = par.sharding;
    req.bucket_bytes = par.bucket_bytes;
    req.sequence_parallel = par.sequence_parallel;
    req.recompute_layers = par.recompute_layers;
    // Stage-aware as the runtime plans it: the formula without a budget.
    if (par.memory_budget > 0)
      req.memory_budget = par.memory_budget;
    else
      req.recompute_ratio = par.recompute_ratio;
    auto costs = partition::analytic_costs(req.device, options.model);
    const auto plan = partition::evaluate_plan(req, *costs, par.dp, par.tp, par.pp,
                                               par.micro_batches, par.schedule, par.recompute,
                                               par.tp_overlap);
    int64_t p = 0, g = 0, o = 0, a = 0, gp = 0;
    for (auto& s : plan.stages) {
      p = std::max(p, s.parameters_bytes);
      g = std::max(g, s.gradients_bytes);
      gp = std::max(gp, s.gradients_peak_bytes);
      o = std::max(o, s.optimizer_bytes);
      a = std::max(a, s.activations_bytes);
    }
    auto ratio = [](int64_t measured, int64_t predicted) {
      return predicted > 0 ? double(measured) / double(predicted) : 0.0;
    };
    auto measured = as_json(got.parameters, got.gradients, got.optimizer, got.activations_peak);
    measured["gradients_peak"] = got.gradients_peak;
    auto predicted = as_json(p, g, o, a);
    predicted["gradients_peak"] = gp;
    rows.push_back({{"layout", par.str()},
                    {"dp_bytes_per_rank", dp_bytes},
                    {"measured", std::move(measured)},
                    {"predicted", std::move(predicted)},
                    {"measured_over_predicted",
                     {{"parameters", ratio(got.parameters, p)},
                      {"gradients", ratio(got.gradients, g)},
                      {"gradients_peak", ratio(got.gradients_peak, gp)},
                      {"optimizer", ratio(got.optimizer, o)},
                      {"activations_peak", ratio(got.activations_peak, a)}}}});
  }
  return {{"benchmark", "memory"},
          {"model", options.model.str()},
          {"batch", options.batch},
          {"layouts", std::move(rows)}};
}

}  // namespace merak::bench
