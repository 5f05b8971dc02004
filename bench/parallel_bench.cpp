#include "bench/parallel_bench.hpp"

#include <algorithm>
#include <thread>

#include "actors/parallel_trainer.hpp"
#include "comm/codec_bench.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "model/gemm.hpp"
#include "model/trainer.hpp"
#include "partition/schedule.hpp"

namespace merak::bench {
namespace {

bool parse_on_off(const std::string& layout, const std::string& v) {
  if (v == "on") return true;
  if (v == "off") return false;
  fail("layout '{}': lend must be on or off (got '{}')", layout, v);
}

actors::parallel_options parse_layout(const std::string& layout) {
  actors::parallel_options p;
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
    else if (k == "recompute")
      p.recompute = partition::parse_recompute_kind(v);
    else if (k == "lend")
      p.lend_cores = parse_on_off(layout, v);
    else
      fail("layout '{}': unknown key '{}' (dp, tp, pp, m, schedule, recompute, overlap, lend)",
           layout, k);
  }
  return p;
}

// Median tokens/s of the measured steps.
template <typename Trainer>
double measure(Trainer& tr, const parallel_bench_options& o) {
  for (int i = 0; i < o.warmup_steps; ++i) tr.train_step();
  std::vector<double> tps;
  for (int i = 0; i < o.steps; ++i) tps.push_back(tr.train_step().tokens_per_s);
  return comm::median(tps);
}

}  // namespace

nlohmann::json run_parallel_bench(const parallel_bench_options& o) {
  if (o.rounds < 1 || o.steps < 1) fail("--rounds and --steps must be at least 1");
  std::vector<std::string> layouts = o.layouts;
  if (layouts.empty()) layouts = {"pp=2,m=8", "dp=2"};
  std::vector<actors::parallel_options> pars;
  for (auto& l : layouts) {
    pars.push_back(parse_layout(l));
    pars.back().validate(o.batch);
  }
  const int T = o.model.max_seq;
  std::vector<uint8_t> bytes(size_t(std::max(1 << 20, 40 * T)));
  rng r(o.seed, 0xB0B);
  for (auto& b : bytes) b = uint8_t(r.below(uint64_t(std::min(o.model.vocab, 256))));
  model::text_corpus corpus(std::move(bytes), T, 0.1, "random");
  model::train_options t;
  t.model = o.model;
  t.batch = o.batch;
  t.steps = o.warmup_steps + o.steps;
  t.seed = o.seed;
  t.eval_batches = 1;

  nlohmann::json rounds = nlohmann::json::array();
  std::vector<std::vector<double>> ratios(layouts.size());
  std::vector<double> all_ratios;
  for (int round = 0; round < o.rounds; ++round) {
    model::set_compute_threads(1);
    double base;
    {
      model::trainer single(t, corpus);
      base = measure(single, o);
    }
    // The machine's own two-thread (or more) scaling, for reference: the
    // same single-device step with every core in each operator.
    model::set_compute_threads(int(std::thread::hardware_concurrency()));
    double all_threads;
    {
      model::trainer single(t, corpus);
      all_threads = measure(single, o);
    }
    all_ratios.push_back(all_threads / base);
    nlohmann::json row = {{"single_1_thread_tokens_per_s", base},
                          {"single_all_threads_tokens_per_s", all_threads},
                          {"single_all_threads_ratio", all_threads / base}};
    for (size_t i = 0; i < layouts.size(); ++i) {
      model::set_compute_threads(1);  // the stages set their own
      actors::parallel_trainer tr(t, pars[i], corpus);
      double tps = measure(tr, o);
      ratios[i].push_back(tps / base);
      row[layouts[i]] = {{"tokens_per_s", tps}, {"ratio", tps / base}};
    }
    rounds.push_back(std::move(row));
  }
  nlohmann::json summary = nlohmann::json::object();
  for (size_t i = 0; i < layouts.size(); ++i) {
    auto v = ratios[i];
    std::sort(v.begin(), v.end());
    summary[layouts[i]] = {
        {"ratio_median", comm::median(v)}, {"ratio_min", v.front()}, {"ratio_max", v.back()}};
  }
  std::sort(all_ratios.begin(), all_ratios.end());
  summary["single device, all threads"] = {{"ratio_median", comm::median(all_ratios)},
                                           {"ratio_min", all_ratios.front()},
                                           {"ratio_max", all_ratios.back()}};
  return {{"benchmark", "parallel"},
          {"cores", int(std::thread::hardware_concurrency())},
          {"layers", o.model.layers},
          {"dim", o.model.dim},
          {"heads", o.model.heads},
          {"seq", T},
          {"batch", o.batch},
          {"steps", o.steps},
          {"warmup_steps", o.warmup_steps},
          {"baseline", "single device, 1 thread, whole batch"},
          {"rounds", std::move(rounds)},
          {"ratio_to_1_thread", std::move(summary)}};
}

}  // namespace merak::bench
