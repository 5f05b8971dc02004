#include "bench/tokenize_bench.hpp"

#include <time.h>

#include <chrono>
#include <fstream>
#include <iterator>

#include "core/error.hpp"
#include "core/files.hpp"

namespace merak::bench {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
// This thread's CPU time: on a shared machine the rate per core is bytes
// over it, whatever the other processes take of the wall clock.
double thread_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}
}  // namespace

nlohmann::json run_tokenize_bench(const tokenize_bench_options& options) {
  if (options.rounds < 1) fail("--rounds: must be at least 1, got {}", options.rounds);
  check_input_file(options.input, "--input");
  std::ifstream in(options.input, std::ios::binary);
  if (!in) fail("--input {}: cannot open", options.input);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};

  auto t0 = std::chrono::steady_clock::now();
  const auto tokenizer = model::text::make_tokenizer(options.tokenizer);
  const double load_s = seconds_since(t0);

  std::vector<int32_t> ids = tokenizer->encode(text);  // untimed: warms caches and pages
  double best = 0, best_cpu = 0;
  for (int r = 0; r < options.rounds; ++r) {
    t0 = std::chrono::steady_clock::now();
    const double c0 = thread_cpu_seconds();
    ids = tokenizer->encode(text);
    const double s = seconds_since(t0), c = thread_cpu_seconds() - c0;
    if (r == 0 || s < best) best = s;
    if (r == 0 || c < best_cpu) best_cpu = c;
  }
  const bool round_trip = tokenizer->decode(ids) == text;
  return {{"benchmark", "tokenize"},
          {"tokenizer", std::string(tokenizer->type_name())},
          {"input", options.input},
          {"bytes", text.size()},
          {"tokens", ids.size()},
          {"rounds", options.rounds},
          {"seconds", best},
          {"mb_per_s", best > 0 ? double(text.size()) / best / 1e6 : 0.0},
          {"cpu_seconds", best_cpu},
          {"mb_per_cpu_s", best_cpu > 0 ? double(text.size()) / best_cpu / 1e6 : 0.0},
          {"threads", 1},
          {"load_seconds", load_s},
          {"round_trip", round_trip}};
}

}  // namespace merak::bench
