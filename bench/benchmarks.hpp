#pragma once
// Benchmarks reachable as `merak bench ...`. Each returns one JSON object
// (printed by the command line); none asserts a time.

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "model/gpt.hpp"

namespace merak::bench {

struct gemm_options {
  std::vector<std::string> backends;  // empty: every backend in this build
  int iters = 10;
  int threads = 0;  // 0: keep the current thread count
  // (M, N, K, trans_a, trans_b); empty: the GPT shapes of the model
  struct shape {
    int M, N, K;
    bool ta, tb;
  };
  std::vector<shape> shapes;
  bool bf16 = true;  // also the default backend with bf16 inputs (gemm_bf16)
};
// The GEMMs of a GPT step with `rows` = batch x sequence tokens (the
// linear layers' forward and both backward products).
std::vector<gemm_options::shape> model_gemm_shapes(const model::gpt_config& m, int rows);
// GFLOP/s of sgemm per backend and shape, and the machine's FP32 peak.
nlohmann::json run_gemm_bench(const gemm_options& options);

struct gpt_bench_options {
  model::gpt_config model;  // model.max_seq = T
  int batch = 8;
  int steps = 10;
  int warmup_steps = 2;
  int threads = 0;
  std::string gemm;  // backend name; empty: default
  uint64_t seed = 1337;
  // model.activations: f32 or bf16 (--precision)
  bool profile = false;  // add per-layer-kind forward/backward times
  // A CUDA device (enabled by the caller): the step runs there, and the JSON
  // reports MFU on `peak_tflops` and the device's peak memory instead of the
  // CPU's GEMM rates.
  model::device where = model::device::cpu();
  double peak_tflops = 989;  // H200 / H100 SXM dense bf16
};
// Full training steps (forward, backward, AdamW) on random tokens: tokens/s,
// step time, achieved GFLOP/s, peak RSS.
nlohmann::json run_gpt_bench(const gpt_bench_options& options);

// The clock of this core right now in GHz, measured (takes ~0.1 s).
double measure_cpu_ghz();
// FP32 FLOPs per cycle per core: two FMA pipes of the widest vector unit.
double cpu_flops_per_cycle();
// FP32 peak GFLOP/s of `threads` cores: measured clock x FLOPs per cycle.
double cpu_peak_gflops(int threads);

}  // namespace merak::bench
