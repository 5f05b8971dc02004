#include "bench/generate_bench.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "model/gemm.hpp"
#include "model/generate.hpp"

namespace merak::bench {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

nlohmann::json run_generate_bench(const generate_bench_options& o) {
  if (o.prompt_lengths.empty()) fail("--prompt-lengths: give at least one length");
  if (o.new_tokens < 1) fail("--new must be at least 1 (got {})", o.new_tokens);
  if (o.rounds < 1) fail("--rounds must be at least 1 (got {})", o.rounds);
  if (o.threads > 0) model::set_compute_threads(o.threads);
  auto m = model::load_decoder(o.load);
  for (int p : o.prompt_lengths)
    if (p < 1 || int64_t(p) + o.new_tokens > m.config.max_seq)
      fail(
          "--prompt-lengths {} with --new {}: each prompt needs 1 to {} tokens (the model's {} "
          "positions less --new)",
          p, o.new_tokens, m.config.max_seq - o.new_tokens, m.config.max_seq);
  nlohmann::json runs = nlohmann::json::array();
  rng r(o.seed, 0x62656e);
  for (int p : o.prompt_lengths) {
    std::vector<int32_t> prompt(static_cast<size_t>(p));
    for (auto& id : prompt) id = int32_t(r.below(uint64_t(m.config.vocab)));
    std::vector<double> prefill, per_token;
    model::generate_options greedy;
    greedy.max_new_tokens = o.new_tokens;
    for (int round = 0; round < o.rounds; ++round) {
      const auto res = model::generate(m.decoder, prompt, greedy);
      prefill.push_back(res.prefill_s);
      per_token.push_back(res.per_token_s);
    }
    runs.push_back({{"prompt_tokens", p},
                    {"new_tokens", o.new_tokens},
                    {"prefill_s", median(prefill)},
                    {"per_token_s", median(per_token)}});
  }
  return {{"bench", "generate"},     {"checkpoint", m.dir},
          {"model", m.config.str()}, {"threads", model::compute_threads()},
          {"rounds", o.rounds},      {"runs", runs}};
}

}  // namespace merak::bench
