#pragma once
// Text generation with a key/value cache, for the built-in families (GPT-2
// and Llama), in fp32 on the host.
//
// kv_decoder runs the decoder directly from the parameters (the same CPU
// kernels the layers use): append() runs some tokens at the next positions,
// each attending over the cached keys and values of every earlier position
// and its own, and adds their keys and values to the cache. A prompt is
// appended once (prefill); each generated token is then one append of ONE
// position, so its cost is flat in the context length apart from the
// attention's dot products. Positions: GPT-2 adds wpe[position]; Llama
// rotates Q and K at the position (rotate-half layout).
//
// The output layer may have more rows than cfg.vocab (a padded vocabulary):
// the logits hold every row, but pick_token only ever chooses among the
// first cfg.vocab.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "model/gpt.hpp"
#include "model/tensor.hpp"

namespace merak::model {

class parameter_store;

// The whole host float tensor called `name` (build_model's parameter
// names). Throws merak::error naming the tensor when there is none.
using weight_source = std::function<tensor(const std::string& name)>;

// Host copies of the parameters of `store` (whole, unsharded values on any
// device); `store` must outlive the source's calls.
weight_source store_weights(const parameter_store& store);

class kv_decoder {
 public:
  // Reads the weights of cfg's family (custom models are refused) and checks
  // their shapes, failing with merak::error naming the tensor, its shape and
  // the expected one. The token embedding and output layer may have more
  // rows than cfg.vocab.
  kv_decoder(const gpt_config& cfg, const weight_source& weights);
  kv_decoder(kv_decoder&&) noexcept;
  kv_decoder& operator=(kv_decoder&&) noexcept;
  ~kv_decoder();

  const gpt_config& config() const;
  // Positions held in the cache, and the most it holds (cfg.max_seq).
  int length() const;
  int capacity() const;
  // Columns of a row of logits: the output layer's rows (>= cfg.vocab).
  int logit_rows() const;

  // Runs `tokens` at positions length() .. length() + n - 1 and caches their
  // keys and values. Returns the logits, row-major: one row per token when
  // all_logits, else the last token's row alone. The reference stays valid
  // until the next append. Throws merak::error when n is 0, when the cache
  // would pass capacity() (naming both numbers), or for a token outside
  // [0, cfg.vocab).
  const std::vector<float>& append(std::span<const int32_t> tokens, bool all_logits = false);
  // Empties the cache (the weights stay).
  void reset();

 private:
  struct impl;
  std::unique_ptr<impl> p_;
};

struct sampling {
  float temperature = 0;  // 0: greedy (the first largest logit)
  int top_k = 0;          // sampled: the k largest logits only; 0: all
  uint64_t seed = 0;
};

// The next token from one row of logits, chosen among the first `vocab`
// entries only: the first maximum when s.temperature is 0, else a draw
// from `r` of softmax(logits / temperature) over the top_k largest. Throws
// merak::error for vocab outside [1, logits.size()] or a negative setting.
int32_t pick_token(std::span<const float> logits, int vocab, const sampling& s, rng& r);

struct generate_options {
  int max_new_tokens = 32;
  sampling sample = {};
  // Generation ends when this id is chosen (it is not part of the result).
  std::optional<int32_t> stop = std::nullopt;
};

struct generate_result {
  std::vector<int32_t> tokens;  // the new tokens
  bool stopped = false;         // ended on generate_options::stop
  double prefill_s = 0;         // the prompt's append and the first pick
  double per_token_s = 0;       // mean seconds of each later one-token step (0: none)
};

// Appends `prompt` to the empty cache of `dec`, then picks and appends up to
// max_new_tokens tokens. Throws merak::error (naming both numbers) when
// the prompt plus max_new_tokens passes the model's positions, for an
// empty prompt, or a max_new_tokens below 1.
generate_result generate(kv_decoder& dec, std::span<const int32_t> prompt,
                         const generate_options& options);

// A checkpoint (run directory or checkpoint directory, single-device or
// sharded) ready to generate from: its model, tokenizer metadata and
// decoder. Throws merak::error naming the checkpoint.
struct loaded_decoder {
  std::string dir;        // the checkpoint directory
  gpt_config config;      // from its merak.model metadata
  std::string tokenizer;  // its merak.tokenizer metadata ("bytes" when absent)
  kv_decoder decoder;
};
loaded_decoder load_decoder(const std::string& path);

}  // namespace merak::model
