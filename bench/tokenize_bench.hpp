#pragma once
// `merak bench tokenize`: a tokenizer's encoding rate on one core.

#include <nlohmann/json.hpp>

#include <string>

#include "model/text/tokenizer.hpp"

namespace merak::bench {

struct tokenize_bench_options {
  model::text::tokenizer_options tokenizer;
  std::string input;  // UTF-8 text, encoded whole
  int rounds = 5;     // timed encodes after one untimed; the fastest counts
};

// Encodes the whole input `rounds` times on the calling thread: bytes,
// tokens, the fastest round's seconds and MB/s (10^6 bytes), the same over
// the thread's CPU time (cpu_seconds, mb_per_cpu_s), the tokenizer's
// load time, and whether ids -> text gives the input back.
nlohmann::json run_tokenize_bench(const tokenize_bench_options& options);

}  // namespace merak::bench
