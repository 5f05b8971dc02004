#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>

#include "bench/benchmarks.hpp"
#include "model/gemm.hpp"
#include "model/tensor.hpp"

namespace merak::bench {

double measure_cpu_ghz() {
  // A chain of dependent 64-bit integer multiplies retires one per three
  // cycles on every x86-64 core of the last decade (Intel since Nehalem, AMD
  // since Zen), so multiplies per second x 3 is the clock the core runs at
  // now, turbo included, which /proc/cpuinfo does not report inside a VM.
  // (Chains of add-immediates do not work: newer Intel cores fold them at
  // rename and retire several per cycle.)
  constexpr int64_t kIters = 4'000'000;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    uint64_t x = 3;
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < kIters; ++i) {
      asm volatile(
          "imul %0, %0\n\timul %0, %0\n\timul %0, %0\n\timul %0, %0\n\t"
          "imul %0, %0\n\timul %0, %0\n\timul %0, %0\n\timul %0, %0"
          : "+r"(x));
    }
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 3.0 * 8.0 * double(kIters) / dt * 1e-9);
  }
  return best;
}

double cpu_flops_per_cycle() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("flags", 0) == 0) {
      // Two FMA pipes x lanes x 2 FLOPs.
      if (line.find(" avx512f") != std::string::npos) return 64;
      if (line.find(" avx2") != std::string::npos) return 32;
      return 8;
    }
  return 8;
}

double cpu_peak_gflops(int threads) {
  return measure_cpu_ghz() * cpu_flops_per_cycle() * threads;
}

nlohmann::json run_gemm_bench(const gemm_options& options) {
  using model::gemm_backend;
  if (options.threads > 0) model::set_compute_threads(options.threads);
  auto shapes = options.shapes;
  if (shapes.empty()) {
    // The GPT L=6 C=384 T=256 B=8 shapes: forward (X W^T) for qkv, mlp.fc,
    // mlp.proj, lm_head; backward dX (dY W) and dW (dY^T X).
    shapes = {{2048, 1152, 384, false, true},  {2048, 1536, 384, false, true},
              {2048, 384, 1536, false, true},  {2048, 256, 384, false, true},
              {2048, 384, 1152, false, false}, {2048, 384, 1536, false, false},
              {1152, 384, 2048, true, false},  {384, 1536, 2048, true, false}};
  }
  std::vector<gemm_backend> backends;
  if (options.backends.empty())
    backends = model::available_gemm_backends();
  else
    for (auto& b : options.backends) backends.push_back(model::parse_gemm_backend(b));
  auto saved = model::current_gemm_backend();
  nlohmann::json results = nlohmann::json::array();
  // Every backend in float; then the default backend with bf16 inputs.
  std::vector<std::pair<gemm_backend, bool>> runs;
  for (auto be : backends) runs.push_back({be, false});
  if (options.bf16) runs.push_back({saved, true});
  for (auto [be, bf16] : runs) {
    model::set_gemm_backend(be);
    double total_flops = 0, total_s = 0;
    nlohmann::json per_shape = nlohmann::json::array();
    for (auto& s : shapes) {
      const auto type = bf16 ? model::dtype::bf16 : model::dtype::f32;
      model::tensor a({int64_t(s.M) * s.K}, type), b({int64_t(s.K) * s.N}, type),
          c({int64_t(s.M) * s.N});
      if (bf16) {
        std::fill_n(a.bf16s(), a.numel(), model::to_bf16(0.5f));
        std::fill_n(b.bf16s(), b.numel(), model::to_bf16(0.25f));
      } else {
        std::fill_n(a.f32(), a.numel(), 0.5f);
        std::fill_n(b.f32(), b.numel(), 0.25f);
      }
      int lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
      auto run = [&] {
        if (bf16)
          model::gemm_bf16(s.ta, s.tb, s.M, s.N, s.K, 1.f, a.bf16s(), lda, b.bf16s(), ldb, 0.f,
                           c.f32(), s.N);
        else
          model::sgemm(s.ta, s.tb, s.M, s.N, s.K, 1.f, a.f32(), lda, b.f32(), ldb, 0.f, c.f32(),
                       s.N);
      };
      run();
      // Best of three timed rounds: the machine is shared and noisy.
      double dt = 1e30;
      for (int round = 0; round < 3; ++round) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < options.iters; ++i) run();
        dt = std::min(dt,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                          options.iters);
      }
      double flops = 2.0 * s.M * s.N * s.K;
      total_flops += flops;
      total_s += dt;
      per_shape.push_back({{"m", s.M},
                           {"n", s.N},
                           {"k", s.K},
                           {"trans_a", s.ta},
                           {"trans_b", s.tb},
                           {"gflops", flops / dt * 1e-9}});
    }
    results.push_back({{"backend", model::gemm_backend_name(be)},
                       {"precision", bf16 ? "bf16" : "fp32"},
                       {"gflops", total_flops / total_s * 1e-9},
                       {"shapes", per_shape}});
  }
  model::set_gemm_backend(saved);
  int th = model::compute_threads();
  double ghz = measure_cpu_ghz();
  return {{"benchmark", "gemm"},
          {"threads", th},
          {"cpu_ghz", ghz},
          {"peak_gflops", ghz * cpu_flops_per_cycle() * th},
          {"bf16_gemm", model::bf16_support()},
          {"results", results}};
}

std::vector<gemm_options::shape> model_gemm_shapes(const model::gpt_config& m, int rows) {
  const int C = m.dim, V = m.vocab;
  std::vector<gemm_options::shape> out;
  // (input features, output features) of qkv, attn.proj, mlp.fc, mlp.proj,
  // lm_head; per layer: forward Y = X W^T, dX = dY W, dW = dY^T X.
  for (auto [in, oc] : {std::pair{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}, {C, V}}) {
    out.push_back({rows, oc, in, false, true});
    out.push_back({rows, in, oc, false, false});
    out.push_back({oc, in, rows, true, false});
  }
  return out;
}

}  // namespace merak::bench
