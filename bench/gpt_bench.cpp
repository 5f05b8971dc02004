#include <algorithm>
#include <chrono>

#include "bench/benchmarks.hpp"
#include "core/process_stats.hpp"
#include "core/rng.hpp"
#include "model/gemm.hpp"
#include "model/trainer.hpp"
#include "partition/planner.hpp"

namespace merak::bench {

nlohmann::json run_gpt_bench(const gpt_bench_options& options) {
  if (options.threads > 0) model::set_compute_threads(options.threads);
  if (!options.gemm.empty()) model::set_gemm_backend(model::parse_gemm_backend(options.gemm));
  // Random bytes: the speed of a step does not depend on the text.
  const int T = options.model.max_seq;
  std::vector<uint8_t> bytes(size_t(std::max(1 << 20, 40 * T)));
  rng r(options.seed, 0xB0B);
  for (auto& b : bytes) b = uint8_t(r.below(uint64_t(std::min(options.model.vocab, 256))));
  model::train_options t;
  t.model = options.model;
  t.batch = options.batch;
  t.steps = options.warmup_steps + options.steps;
  t.seed = options.seed;
  t.where = options.where;
  model::trainer tr(t, model::text_corpus(std::move(bytes), T, 0.1, "random"));
  for (int i = 0; i < options.warmup_steps; ++i) tr.train_step();
  // Two clock reads per node: negligible. Not on a GPU, where a node's
  // kernels are only queued by the time the clock is read.
  tr.model_executor().set_profiling(options.where.type == model::device::kind::cpu);
  std::vector<double> times;
  double loss = 0, fwd = 0, bwd = 0, opt = 0;
  for (int i = 0; i < options.steps; ++i) {
    auto s = tr.train_step();
    times.push_back(s.step_s);
    loss = s.loss;
    fwd += s.forward_s;
    bwd += s.backward_s;
    opt += s.optimizer_s;
  }
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  double mean = 0;
  for (double x : times) mean += x;
  mean /= double(times.size());
  const double tokens = double(options.batch) * T;
  // Training FLOPs: forward plus backward (twice the forward).
  const double flops = 3.0 * tr.model_graph().flops_per_token() * tokens;
  int th = model::compute_threads();
  // GEMM share: the linear layers' FLOPs (forward + backward = 3x forward)
  // over the time spent in them.
  double linear_flops = 0;
  for (auto& node : tr.model_graph().nodes())
    if (node.kind == "linear") linear_flops += 3.0 * node.flops_per_token * tokens;
  double linear_s = 0;
  if (auto it = tr.model_executor().profile().find("linear");
      it != tr.model_executor().profile().end())
    linear_s = (it->second.forward_s + it->second.backward_s) / options.steps;
  const double peak_rss_mb = double(peak_rss_bytes()) / (1 << 20);  // before the GEMM run
  nlohmann::json profile = nlohmann::json::object();
  for (auto& [kind, t] : tr.model_executor().profile())
    profile[kind] = {{"forward_ms", t.forward_s * 1e3 / options.steps},
                     {"backward_ms", t.backward_s * 1e3 / options.steps}};
  nlohmann::json out = {{"benchmark", "gpt"},
                        {"layers", options.model.layers},
                        {"dim", options.model.dim},
                        {"heads", options.model.heads},
                        {"seq", T},
                        {"batch", options.batch},
                        {"vocab", options.model.vocab},
                        {"params", tr.model_graph().parameter_count()},
                        {"precision", model::precision_name(options.model.activations)},
                        {"steps", options.steps},
                        {"tokens_per_s", tokens / mean},
                        {"step_s", mean},
                        {"step_s_median", sorted[sorted.size() / 2]},
                        {"step_s_min", sorted.front()},
                        {"step_s_max", sorted.back()},
                        {"final_loss", loss},
                        {"forward_ms", fwd * 1e3 / options.steps},
                        {"backward_ms", bwd * 1e3 / options.steps},
                        {"optimizer_ms", opt * 1e3 / options.steps},
                        {"peak_rss_mb", peak_rss_mb}};
  if (options.profile) out["profile_per_step"] = profile;
  if (options.where.type != model::device::kind::cpu) {
    // Megatron-LM's count (grouped-query attention and SwiGLU included).
    const double mfu_flops = partition::megatron_flops(options.model, options.batch, false);
    out["device"] = options.where.str();
    out["tflops"] = mfu_flops / mean * 1e-12;
    out["mfu"] = mfu_flops / mean / (options.peak_tflops * 1e12);
    out["mfu_flop_count"] = "megatron (no recomputation)";
    out["peak_tflops"] = options.peak_tflops;
    out["peak_device_memory_mb"] = double(model::device_peak_bytes(options.where)) / (1 << 20);
    return out;
  }
  double ghz = measure_cpu_ghz();
  // The GEMM rate of this machine on this model's shapes, measured in the
  // same run, with the backend the steps used.
  gemm_options go;
  go.backends = {std::string(model::gemm_backend_name(model::current_gemm_backend()))};
  go.shapes = model_gemm_shapes(options.model, options.batch * T);
  go.iters = 3;
  go.bf16 = options.model.activations == model::dtype::bf16;
  auto gemm = run_gemm_bench(go);
  double sgemm_gflops = 0, bf16_gflops = 0;
  for (auto& r : gemm["results"])
    (r["precision"] == "bf16" ? bf16_gflops : sgemm_gflops) = r["gflops"].get<double>();
  const double gemm_gflops = go.bf16 ? bf16_gflops : sgemm_gflops;
  out["threads"] = th;
  out["gemm"] = model::gemm_backend_name(model::current_gemm_backend());
  out["bf16_gemm"] = model::bf16_support();
  out["gflops"] = flops / mean * 1e-9;
  out["matmul_gflops"] = linear_s > 0 ? linear_flops / linear_s * 1e-9 : 0.0;
  out["sgemm_gflops"] = sgemm_gflops;
  out["bf16_gemm_gflops"] = bf16_gflops;
  out["step_share_of_gemm_rate"] = flops / mean * 1e-9 / gemm_gflops;
  out["cpu_ghz"] = ghz;
  out["peak_gflops"] = ghz * cpu_flops_per_cycle() * th;
  return out;
}

}  // namespace merak::bench
