// `merak bench ...`: benchmarks that print one JSON object each.
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "apps/commands.hpp"
#include "bench/benchmarks.hpp"

namespace merak::apps {

action add_bench_command(CLI::App& parent) {
  auto* b = parent.add_subcommand("bench", "Benchmarks (JSON on stdout)");
  b->require_subcommand(1);

  auto gpt = std::make_shared<bench::gpt_bench_options>();
  auto* g = b->add_subcommand("gpt", "GPT training steps: tokens/s, GFLOP/s, peak memory");
  g->add_option("--layers", gpt->model.layers)->capture_default_str();
  g->add_option("--dim", gpt->model.dim)->capture_default_str();
  g->add_option("--heads", gpt->model.heads)->capture_default_str();
  g->add_option("--seq", gpt->model.max_seq)->capture_default_str();
  g->add_option("--vocab", gpt->model.vocab)->capture_default_str();
  g->add_option("--batch", gpt->batch)->capture_default_str();
  g->add_option("--steps", gpt->steps, "Measured steps")->capture_default_str();
  g->add_option("--warmup-steps", gpt->warmup_steps, "Unmeasured steps first")->capture_default_str();
  g->add_option("--threads", gpt->threads, "Compute threads (default: all cores)");
  g->add_option("--gemm", gpt->gemm, "GEMM backend: onednn, openblas or eigen");
  g->add_flag("--profile", gpt->profile, "Add per-layer-kind times to the JSON");
  g->add_flag("--json")->description("Print JSON (the only output format; accepted for scripts)");

  auto gemm = std::make_shared<bench::gemm_options>();
  auto* m = b->add_subcommand("gemm", "sgemm GFLOP/s per backend on the GPT shapes");
  m->add_option("--backend", gemm->backends, "Backends to measure (default: all)");
  m->add_option("--iters", gemm->iters)->capture_default_str();
  m->add_option("--threads", gemm->threads, "Compute threads (default: all cores)");
  m->add_flag("--json")->description("Print JSON (the only output format; accepted for scripts)");

  return [b, g, m, gpt, gemm] {
    nlohmann::json out;
    if (b->got_subcommand(g)) out = bench::run_gpt_bench(*gpt);
    if (b->got_subcommand(m)) out = bench::run_gemm_bench(*gemm);
    std::cout << out.dump() << std::endl;
    return 0;
  };
}

}  // namespace merak::apps
