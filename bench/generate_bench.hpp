#pragma once
// `merak bench generate`: the KV-cached decoder's prefill time and mean
// per-token time at several prompt lengths (model/generate.hpp).

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace merak::bench {

struct generate_bench_options {
  std::string load;                               // checkpoint or run directory
  std::vector<int> prompt_lengths{16, 64, 256};  // prompt tokens per measurement
  int new_tokens = 32;                            // greedy tokens after each prompt
  int rounds = 3;                                 // repetitions; the medians count
  uint64_t seed = 1;                              // of the random prompt ids
  int threads = 0;                                // compute threads (0: all cores)
};

// For each prompt length P: a prompt of P random ids below the model's
// vocabulary, then new_tokens greedy tokens (the end-of-document id is not
// a stop). Reports per P the medians over the rounds of the prefill seconds
// and of the mean per-token seconds. Throws merak::error naming the flag
// when P + new_tokens passes the model's positions.
nlohmann::json run_generate_bench(const generate_bench_options& options);

}  // namespace merak::bench
