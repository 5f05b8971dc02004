// `merak bench ...`: benchmarks that print one JSON object each.
#include <CLI/CLI.hpp>

#include <functional>
#include <iostream>
#include <memory>
#include <vector>

#include "actors/synthetic_pipeline.hpp"
#include "apps/commands.hpp"
#include "apps/device_flag.hpp"
#include "apps/tokenizer_flags.hpp"
#include "bench/allreduce_bench.hpp"
#include "bench/benchmarks.hpp"
#include "bench/generate_bench.hpp"
#include "bench/p2p_bench.hpp"
#include "bench/parallel_bench.hpp"
#include "bench/svm_bench.hpp"
#include "bench/tokenize_bench.hpp"
#include "core/error.hpp"
#include "model/gpt.hpp"
#include "partition/schedule.hpp"

namespace merak::apps {

namespace {

// A `merak bench` sub-command: its CLI11 sub-command and what runs it once
// it was chosen (the JSON to print; null: a worker process that prints none).
struct bench_command {
  CLI::App* command;
  std::function<nlohmann::json()> run;
};

// `merak bench gpt`: GPT training steps.
bench_command add_gpt_bench(CLI::App& parent) {
  auto gpt = std::make_shared<bench::gpt_bench_options>();
  auto gpt_precision = std::make_shared<std::string>("fp32");
  auto* g = parent.add_subcommand("gpt", "GPT training steps: tokens/s, GFLOP/s, peak memory");
  g->add_option("--layers", gpt->model.layers)->capture_default_str();
  g->add_option("--dim", gpt->model.dim)->capture_default_str();
  g->add_option("--heads", gpt->model.heads)->capture_default_str();
  g->add_option("--seq", gpt->model.max_seq)->capture_default_str();
  g->add_option("--vocab", gpt->model.vocab)->capture_default_str();
  g->add_option("--batch", gpt->batch)->capture_default_str();
  auto gpt_family = std::make_shared<std::string>("gpt");
  g->add_option("--model", *gpt_family, "Model family: gpt or llama")->capture_default_str();
  g->add_option("--num-query-groups", gpt->model.query_groups,
                "Llama: key/value groups (0: one per head)");
  g->add_option("--ffn-hidden-size", gpt->model.ffn_hidden, "Llama: MLP width (0: Megatron's)");
  g->add_option("--steps", gpt->steps, "Measured steps")->capture_default_str();
  g->add_option("--warmup-steps", gpt->warmup_steps, "Unmeasured steps first")
      ->capture_default_str();
  g->add_option("--threads", gpt->threads, "Compute threads (default: all cores)");
  g->add_option("--gemm", gpt->gemm, "GEMM backend: onednn, openblas or eigen");
  g->add_option("--precision", *gpt_precision, "fp32 or bf16")->capture_default_str();
  auto gpt_device = std::make_shared<std::string>("cpu");
  g->add_option("--device", *gpt_device, "cpu, cuda or cuda:N")->capture_default_str();
  g->add_option("--peak-tflops", gpt->peak_tflops,
                "On a GPU: the dense peak MFU is counted against (bf16; TF32 for fp32)")
      ->capture_default_str();
  g->add_flag("--profile", gpt->profile, "Add per-layer-kind times to the JSON");
  g->add_flag("--json")->description("Print JSON (the only output format; accepted for scripts)");
  return {g, [=] {
            gpt->model.activations = model::parse_precision(*gpt_precision);
            gpt->model.family = model::parse_model_family(*gpt_family);
            gpt->where = apps::enable_device(*gpt_device);
            return bench::run_gpt_bench(*gpt);
          }};
}

// `merak bench gemm`: sgemm per backend.
bench_command add_gemm_bench(CLI::App& parent) {
  auto gemm = std::make_shared<bench::gemm_options>();
  auto* m = parent.add_subcommand("gemm", "sgemm GFLOP/s per backend on the GPT shapes");
  m->add_option("--backend", gemm->backends, "Backends to measure (default: all)");
  m->add_option("--iters", gemm->iters)->capture_default_str();
  m->add_option("--threads", gemm->threads, "Compute threads (default: all cores)");
  m->add_flag("--json")->description("Print JSON (the only output format; accepted for scripts)");
  return {m, [=] { return bench::run_gemm_bench(*gemm); }};
}

// `merak bench svm`: one ADMM SVM fit.
bench_command add_svm_bench(CLI::App& parent) {
  auto svm_options = std::make_shared<bench::svm_bench_options>();
  auto penalty = std::make_shared<std::string>("l1");
  auto theta = std::make_shared<double>(0.0);
  auto solver = std::make_shared<std::string>("auto");
  auto nonconvex = std::make_shared<std::string>("auto");
  auto lla_start = std::make_shared<std::string>("zero");
  auto* s = parent.add_subcommand(
      "svm", "ADMM SVM fit: time, iterations, non-zeros, CV accuracy, peak memory");
  s->add_option("--data", svm_options->data, "LIBSVM or CSV file (default: synthetic data)");
  s->add_option("--format", svm_options->format, "libsvm, csv or auto")->capture_default_str();
  s->add_option("--n", svm_options->synthetic.n, "Synthetic samples")->capture_default_str();
  s->add_option("--p", svm_options->synthetic.p, "Synthetic features")->capture_default_str();
  s->add_option("--density", svm_options->synthetic.density, "Synthetic share of non-zeros")
      ->capture_default_str();
  s->add_option("--seed", svm_options->synthetic.seed, "Synthetic data seed")
      ->capture_default_str();
  s->add_option("--penalty", *penalty, "l1, scad, mcp, lsp or capped-l1")->capture_default_str();
  s->add_option("--lambda", svm_options->fit.pen.lambda)->capture_default_str();
  s->add_option("--theta", *theta, "Second penalty parameter (default per penalty)");
  s->add_option("--rho1", svm_options->fit.admm.rho1, "(default: automatic)");
  s->add_option("--rho2", svm_options->fit.admm.rho2, "(default: automatic)");
  s->add_option("--tol", svm_options->fit.admm.rel_tol, "Relative tolerance (absolute: tol/10)")
      ->capture_default_str();
  s->add_option("--max-iter", svm_options->fit.admm.max_iter)->capture_default_str();
  s->add_option("--solver", *solver, "w-step: auto, cholesky, woodbury or cg")
      ->capture_default_str();
  s->add_option("--screening", svm_options->fit.admm.screening,
                "Working sets for wide data (L1 and LLA steps): on or off")
      ->capture_default_str();
  s->add_option("--nonconvex", *nonconvex,
                "Nonconvex penalties: auto (lla for LSP and when features outnumber samples), lla "
                "or direct")
      ->capture_default_str();
  s->add_option("--lla-steps", svm_options->fit.lla_opts.max_steps,
                "Nonconvex (lla): at most this many reweighted L1 steps after the first, per chain")
      ->capture_default_str();
  s->add_option("--lla-start", *lla_start,
                "Nonconvex (lla): zero, l1 or best (both chains, the lower objective kept)")
      ->capture_default_str();
  s->add_option("--workers", svm_options->fit.workers, "Consensus ADMM over K in-process shards")
      ->capture_default_str();
  s->add_option("--folds", svm_options->folds,
                "Also cross-validate with F folds (sample i in fold i mod F)");
  s->add_option("--threads", svm_options->threads,
                "Threads for the matrix products (default: all cores)");
  s->add_flag("--json")->description("Print JSON (the only output format; accepted for scripts)");
  return {s, [=] {
            svm_options->fit.pen.kind = svm::parse_penalty_kind(*penalty);
            svm_options->fit.pen.theta =
                *theta != 0 ? *theta : svm::default_theta(svm_options->fit.pen.kind);
            svm_options->fit.admm.abs_tol = svm_options->fit.admm.rel_tol / 10;
            svm_options->fit.admm.method = svm::parse_w_method(*solver);
            svm_options->fit.nonconvex = svm::parse_nonconvex_method(*nonconvex);
            svm_options->fit.lla_opts.start = svm::parse_lla_start(*lla_start);
            if (svm_options->fit.lla_opts.max_steps < 0)
              fail("--lla-steps must not be negative (got {})",
                   svm_options->fit.lla_opts.max_steps);
            return bench::run_svm_bench(*svm_options);
          }};
}

// `merak bench pipeline`: stage actors on synthetic ops against the simulator.
bench_command add_pipeline_bench(CLI::App& parent) {
  auto pipe = std::make_shared<actors::synthetic_pipeline_options>();
  auto pipe_schedule = std::make_shared<std::string>("1f1b");
  auto* pl = parent.add_subcommand("pipeline",
                                   "Stage actors running synthetic ops of known cost: "
                                   "measured step and bubble against the simulator");
  pl->add_option("--pp", pipe->pp)->capture_default_str();
  pl->add_option("--micro-batches", pipe->micro_batches)->capture_default_str();
  pl->add_option("--schedule", *pipe_schedule, "gpipe, 1f1b, shifted or zb-h1")
      ->capture_default_str();
  pl->add_flag("--full-recompute", pipe->full_recompute);
  pl->add_option("--t-f-us", pipe->t_f_us, "Forward cost (microseconds)")->capture_default_str();
  pl->add_option("--t-b-us", pipe->t_b_us, "Backward cost (microseconds)")->capture_default_str();
  pl->add_option("--t-r-us", pipe->t_r_us, "Recomputation cost (microseconds)")
      ->capture_default_str();
  pl->add_option("--t-w-us", pipe->t_w_us,
                 "zb-h1: weight-gradient cost (microseconds; --t-b-us is then the input gradient)")
      ->capture_default_str();
  pl->add_option("--steps", pipe->steps, "Steps (the median is reported)")->capture_default_str();
  pl->add_option("--spin-us", pipe->spin_us,
                 "Idle stages poll their mailbox this long before blocking; -1: automatic "
                 "(200 when the stages fit on the cores, else 0)")
      ->capture_default_str();
  pl->add_flag("--json")->description("Print JSON (the only output format; accepted for scripts)");
  return {pl, [=] {
            pipe->schedule = partition::parse_schedule(*pipe_schedule);
            auto r = actors::run_synthetic_pipeline(*pipe);
            return nlohmann::json{{"benchmark", "pipeline"},
                                  {"pp", pipe->pp},
                                  {"micro_batches", pipe->micro_batches},
                                  {"schedule", *pipe_schedule},
                                  {"full_recompute", pipe->full_recompute},
                                  {"spin_us", pipe->spin_us},
                                  {"t_f_us", pipe->t_f_us},
                                  {"t_b_us", pipe->t_b_us},
                                  {"t_r_us", pipe->t_r_us},
                                  {"t_w_us", pipe->t_w_us},
                                  {"step_us", r.makespan_us},
                                  {"simulated_step_us", r.simulated_makespan_us},
                                  {"bubble", r.bubble},
                                  {"simulated_bubble", r.simulated_bubble},
                                  {"overhead_us_per_op", r.overhead_us_per_op},
                                  {"orders_match_simulator", r.orders_match}};
          }};
}

// `merak bench allreduce`: one all-reduce method between processes.
bench_command add_allreduce_bench(CLI::App& parent) {
  auto ar = std::make_shared<bench::allreduce_bench_options>();
  auto* a = parent.add_subcommand("allreduce",
                                  "All-reduce of an (n, d) gradient between --procs processes: "
                                  "dense ring, coo, union, s2, MPI_Allreduce or NCCL");
  a->add_option("--procs", ar->procs)->capture_default_str();
  a->add_option("--method", ar->method, "dense, coo, union, s2, mpi (MPI_Allreduce) or nccl (GPUs)")
      ->capture_default_str();
  a->add_option("--transport", ar->transport, "ucx or inproc (threads)")->capture_default_str();
  a->add_option("--op", ar->op,
                "allreduce, or the ring's halves: reduce-scatter, all-gather (dense or mpi), "
                "all-gather-bf16 (dense: bf16 on the wire)")
      ->capture_default_str();
  a->add_option("--rows", ar->rows, "n")->capture_default_str();
  a->add_option("--cols", ar->cols, "d")->capture_default_str();
  a->add_option("--row-density", ar->row_density, "Share of non-zero rows per rank")
      ->capture_default_str();
  a->add_option("--sketch-ratio", ar->sketch_ratio, "s2: r*w / (n*d)")->capture_default_str();
  a->add_option("--sketch-rows", ar->sketch_rows, "s2: r")->capture_default_str();
  a->add_option("--error-feedback", ar->error_feedback, "s2: off, contractive or plain")
      ->capture_default_str();
  a->add_option("--sketch-hash", ar->sketch_hash, "s2: rows (contiguous runs) or elements")
      ->capture_default_str();
  a->add_flag("--known-rows", ar->known_rows, "Hand the codec the non-zero rows (no scan)");
  a->add_option("--iters", ar->iters)->capture_default_str();
  a->add_option("--seed", ar->seed)->capture_default_str();
  a->add_option("--timeout-s", ar->timeout_s, "Whole job; every wait is bounded by min(this, 60 s)")
      ->capture_default_str();
  a->add_option("--mpi-args", ar->mpi_args, "Extra mpirun arguments for --method mpi");
  a->add_flag("--json")->description("Print JSON (the only output format; accepted for scripts)");
  return {a, [=] { return bench::run_allreduce_bench(*ar); }};
}

// The model shape and global batch of the layout benchmarks.
void add_layout_model_flags(CLI::App* c, bench::parallel_bench_options& o) {
  c->add_option("--layers", o.model.layers)->capture_default_str();
  c->add_option("--dim", o.model.dim)->capture_default_str();
  c->add_option("--heads", o.model.heads)->capture_default_str();
  c->add_option("--seq", o.model.max_seq)->capture_default_str();
  c->add_option("--vocab", o.model.vocab)->capture_default_str();
  c->add_option("--batch", o.batch, "Global batch of a step (every layout)")->capture_default_str();
  c->add_option_function<std::string>(
       "--precision",
       [&o](const std::string& s) { o.model.activations = model::parse_precision(s); },
       "fp32 (default) or bf16, every layout and the baseline")
      ->check(CLI::IsMember({"fp32", "bf16"}));
}

// `merak bench parallel`: parallel layouts against one thread.
bench_command add_parallel_bench(CLI::App& parent) {
  auto par = std::make_shared<bench::parallel_bench_options>();
  auto* pb = parent.add_subcommand(
      "parallel", "Parallel layouts' tokens/s against one thread, interleaved in rounds");
  add_layout_model_flags(pb, *par);
  pb->add_option("--steps", par->steps, "Measured steps per run")->capture_default_str();
  pb->add_option("--warmup-steps", par->warmup_steps)->capture_default_str();
  pb->add_option("--rounds", par->rounds, "Baseline then every layout, this many times")
      ->capture_default_str();
  pb->add_option("--layout", par->layouts,
                 "key=value,... of dp tp pp m schedule chunks recompute overlap sp sharding "
                 "param_gather lend rings procs (procs=N: N processes of one job through `merak train`; default: pp=2,m=8 "
                 "and dp=2)");
  pb->add_flag("--json")->description("Print JSON (the only output format; accepted for scripts)");
  return {pb, [=] { return bench::run_parallel_bench(*par); }};
}

// `merak bench memory`: bytes held by category, measured and predicted.
bench_command add_memory_bench(CLI::App& parent) {
  auto par = std::make_shared<bench::parallel_bench_options>();
  auto* mb = parent.add_subcommand(
      "memory", "Bytes the stage actors hold by category after one step, beside the planner's");
  add_layout_model_flags(mb, *par);
  mb->add_option("--layout", par->layouts,
                 "key=value,... of dp tp pp m schedule chunks recompute overlap sp sharding")
      ->required();
  mb->add_flag("--json")->description("Print JSON (the only output format; accepted for scripts)");
  return {mb, [=] { return bench::run_memory_bench(*par); }};
}

// `merak bench p2p`: the tensor channel between 2 processes.
bench_command add_p2p_bench(CLI::App& parent) {
  auto p2p = std::make_shared<bench::p2p_bench_options>();
  auto* pp = parent.add_subcommand(
      "p2p", "A tensor moved between 2 processes by the runtime's tensor channel, against UCX");
  pp->add_option("--bytes", p2p->bytes, "Message sizes (repeatable)")->capture_default_str();
  pp->add_option("--iters", p2p->iters, "Round trips per size")->capture_default_str();
  pp->add_option("--buffers", p2p->buffers, "Buffers rank 0 sends from in turn")
      ->capture_default_str();
  pp->add_option("--spin-us", p2p->spin_us,
                 "The channel thread polls this long after traffic before it sleeps; -1: "
                 "automatic (200 when the channel threads fit on the cores)")
      ->capture_default_str();
  pp->add_flag("--json")->description("Print JSON (the only output format; accepted for scripts)");
  return {pp, [=] { return bench::run_p2p_bench(*p2p); }};
}

// `merak bench tokenize`: a tokenizer's MB/s on one core.
bench_command add_tokenize_bench(CLI::App& parent) {
  auto tok = std::make_shared<bench::tokenize_bench_options>();
  auto* t = parent.add_subcommand("tokenize", "A tokenizer's encoding rate on one core (MB/s)");
  add_tokenizer_flags(*t, tok->tokenizer);
  t->add_option("--input", tok->input, "UTF-8 text, encoded whole")->required();
  t->add_option("--rounds", tok->rounds, "Timed encodes (the fastest counts)")
      ->capture_default_str();
  t->add_flag("--json")->description("Print JSON (the only output format; accepted for scripts)");
  return {t, [=] { return bench::run_tokenize_bench(*tok); }};
}

// `merak bench generate`: the KV-cached decoder's prefill and per-token times.
bench_command add_generate_bench(CLI::App& parent) {
  auto gen = std::make_shared<bench::generate_bench_options>();
  auto* g = parent.add_subcommand(
      "generate", "Text generation: prefill and mean per-token seconds per prompt length");
  g->add_option("--load", gen->load, "A run directory (its latest) or a checkpoint directory")
      ->required();
  g->add_option("--prompt-lengths", gen->prompt_lengths, "Prompt lengths in tokens: 16,64,256")
      ->delimiter(',')
      ->capture_default_str();
  g->add_option("--new", gen->new_tokens, "Greedy tokens generated after each prompt")
      ->check(CLI::Range(1, 1 << 30))
      ->capture_default_str();
  g->add_option("--rounds", gen->rounds, "Repetitions per length (the medians count)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  g->add_option("--seed", gen->seed, "Seed of the random prompt ids")->capture_default_str();
  g->add_option("--threads", gen->threads, "Compute threads (default: all cores)")
      ->check(CLI::Range(0, 4096));
  return {g, [=] { return bench::run_generate_bench(*gen); }};
}

}  // namespace

action add_bench_command(CLI::App& parent) {
  auto* b = parent.add_subcommand("bench", "Benchmarks (JSON on stdout)");
  b->require_subcommand(1);
  const std::vector<bench_command> commands{
      add_gpt_bench(*b),       add_gemm_bench(*b),     add_svm_bench(*b), add_pipeline_bench(*b),
      add_allreduce_bench(*b), add_parallel_bench(*b), add_memory_bench(*b), add_p2p_bench(*b),
      add_tokenize_bench(*b),  add_generate_bench(*b)};
  return [b, commands] {
    for (const auto& c : commands)
      if (b->got_subcommand(c.command)) {
        const nlohmann::json out = c.run();
        if (out.is_null()) return 0;  // a worker that does not print
        std::cout << out.dump() << std::endl;
        return 0;
      }
    return 0;
  };
}

}  // namespace merak::apps
