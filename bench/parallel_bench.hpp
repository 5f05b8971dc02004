#pragma once
// `merak bench parallel`: tokens/s of parallel layouts against one thread.
//
// The runtime's speed target is a ratio to the one-thread single-device run
// on the same machine, and a shared or virtual machine's speed drifts over
// minutes.
// Each round therefore runs the one-thread baseline and then every layout,
// back to back in one process on the same random tokens, and the ratios are
// taken within a round.

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "model/gpt.hpp"

namespace merak::bench {

struct parallel_bench_options {
  model::gpt_config model;  // model.max_seq = T
  int batch = 8;            // global batch of a step, for every layout
  int steps = 8;            // measured steps per run
  int warmup_steps = 2;     // unmeasured steps first
  int rounds = 3;
  uint64_t seed = 1337;
  // Layouts as comma-separated key=value: dp, tp, pp, m (micro-batches),
  // schedule (gpipe|1f1b|shifted), recompute (none|full|stage-aware),
  // overlap (TP level), lend (on|off), procs (processes), rings (on|off:
  // the processes' shared rings; compared with the layout in one process
  // like procs). Empty: "pp=2,m=8" and "dp=2".
  std::vector<std::string> layouts;
};

// Per round: the baseline's and each layout's median tokens/s and their
// ratio; then per layout the median, lowest and highest ratio over rounds.
// Throws merak::error naming the layout and key that do not parse.
nlohmann::json run_parallel_bench(const parallel_bench_options& options);

// `merak bench memory`: for each layout (in one process; rounds, steps and
// procs do not apply) the bytes the stage actors hold after one step, each
// category's largest over the actors (memory_bytes), beside the planner's
// prediction for the same layout (partition/planner.hpp, each category's
// largest over the stages) and their ratio.
nlohmann::json run_memory_bench(const parallel_bench_options& options);

}  // namespace merak::bench
