// `merak generate --load CKPT --prompt TEXT | --prompt-ids 1,2,3`: the
// continuation of a prompt by a checkpoint's model (model/generate.hpp: a
// KV-cached decoder, greedy unless --temperature is above 0), printed as
// text, or with --json as one object with the ids and the timings.
// docs/generate.md.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "apps/commands.hpp"
#include "apps/tokenizer_flags.hpp"
#include "core/error.hpp"
#include "model/gemm.hpp"
#include "model/generate.hpp"

namespace merak::apps {

namespace {

struct generate_flags {
  std::string load, prompt, prompt_ids;
  int max_new_tokens = 32;
  float temperature = 0;
  int top_k = 0;
  uint64_t seed = 0;
  bool ignore_eos = false, json = false;
  bool use_ids = false;  // --prompt-ids was given (even empty)
  int threads = 0;
  model::text::tokenizer_options tokenizer;
};

// "1,2,3" -> ids; fails naming --prompt-ids and the entry.
std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::logic_error&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || v < 0 || v > INT32_MAX)
      fail("--prompt-ids: '{}' is not a token id (a comma-separated list such as 1,2,3)", item);
    ids.push_back(int32_t(v));
    at = comma + 1;
  }
  return ids;
}

int run_generate(const generate_flags& f) {
  if (f.threads > 0) model::set_compute_threads(f.threads);
  if (!(f.temperature >= 0)) fail("--temperature must be at least 0 (got {})", f.temperature);
  if (f.top_k > 0 && f.temperature == 0)
    fail("--top-k {} needs --temperature above 0 (greedy decoding takes the top 1)", f.top_k);
  const auto tok = model::text::make_tokenizer(f.tokenizer);
  std::vector<int32_t> prompt;
  if (f.use_ids) {
    prompt = parse_ids(f.prompt_ids);
  } else {
    if (f.prompt.empty()) fail("--prompt is empty: give some text (or --prompt-ids)");
    prompt = tok->encode(f.prompt);
    if (prompt.empty()) fail("--prompt '{}' encodes to no tokens", f.prompt);
  }
  auto m = model::load_decoder(f.load);
  if (m.tokenizer == "words")
    fail(
        "checkpoint '{}' was trained on hashed words (--tokenizer words), which cannot be turned "
        "back into text; generate reads byte-level and --tokenizer-type checkpoints",
        m.dir);
  for (int32_t id : prompt)
    if (id >= m.config.vocab)
      fail("{}: token id {} is outside the vocabulary of checkpoint '{}' ([0, {}))",
           f.use_ids ? std::string("--prompt-ids")
                     : "--prompt (" + std::string(tok->type_name()) + ")",
           id, m.dir, m.config.vocab);
  model::generate_options o;
  o.max_new_tokens = f.max_new_tokens;
  o.sample = {.temperature = f.temperature, .top_k = f.top_k, .seed = f.seed};
  if (!f.ignore_eos) o.stop = tok->eod();
  const auto res = model::generate(m.decoder, prompt, o);
  for (int32_t id : res.tokens)
    if (id >= tok->vocab_size())
      fail(
          "the model chose token id {}, past the {}'s vocabulary of {} (the model's is {}): pass "
          "the --tokenizer-type the model was trained with (new ids: {})",
          id, tok->type_name(), tok->vocab_size(), m.config.vocab, fmt::join(res.tokens, ","));
  const std::string text = tok->decode(res.tokens);
  if (!f.json) {
    std::printf("%s\n", text.c_str());
    return 0;
  }
  const nlohmann::json out{{"checkpoint", m.dir},
                           {"model", m.config.str()},
                           {"prompt_tokens", prompt.size()},
                           {"new_tokens", res.tokens},
                           {"stopped_at_eod", res.stopped},
                           {"text", text},
                           {"prefill_s", res.prefill_s},
                           {"per_token_s", res.per_token_s}};
  std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  return 0;
}

}  // namespace

action add_generate_command(CLI::App& parent) {
  auto f = std::make_shared<generate_flags>();
  auto* c = parent.add_subcommand(
      "generate", "Continue a prompt with a checkpoint's model (KV-cached, greedy by default)");
  c->add_option("--load", f->load, "A run directory (its latest) or a checkpoint directory")
      ->required();
  auto* text = c->add_option("--prompt", f->prompt, "The prompt text (encoded by the tokenizer)");
  auto* ids = c->add_option("--prompt-ids", f->prompt_ids,
                            "The prompt as token ids instead, comma-separated: 1,2,3")
                  ->excludes(text);
  text->excludes(ids);
  c->add_option("--max-new-tokens", f->max_new_tokens, "Tokens to generate at most")
      ->check(CLI::Range(1, 1 << 30))
      ->capture_default_str();
  c->add_option("--temperature", f->temperature, "0: greedy; above 0: sample softmax(z / T)")
      ->check(CLI::Range(0.0f, 1e6f))
      ->capture_default_str();
  c->add_option("--top-k", f->top_k, "Sample among the K most likely tokens only (0: all)")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  c->add_option("--seed", f->seed, "Seed of the sampling")->capture_default_str();
  c->add_flag("--ignore-eos", f->ignore_eos,
              "Go on past the tokenizer's end-of-document id (to --max-new-tokens)");
  c->add_option("--threads", f->threads, "Compute threads (default: all cores)")
      ->check(CLI::Range(0, 4096));
  c->add_flag("--json", f->json,
              "Print one JSON object: prompt_tokens, new_tokens, text, prefill_s, per_token_s");
  add_tokenizer_flags(*c, f->tokenizer);
  return [f, text, ids] {
    if (!*text && !*ids) fail("generate: give --prompt TEXT or --prompt-ids 1,2,3");
    f->use_ids = bool(*ids);
    return run_generate(*f);
  };
}

}  // namespace merak::apps
