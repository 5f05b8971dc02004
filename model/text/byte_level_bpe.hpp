#pragma once
// The byte-level BPE tokenizer behind GPT2BPETokenizer and
// HuggingFaceTokenizer: added tokens are cut out of the text first (the
// leftmost, then longest, match), each stretch between them runs through
// the pre-tokenizer steps, and each resulting piece is one BPE word
// (bpe.hpp). Built by the readers of encoder.json + vocab.bpe
// (gpt2_tokenizer.cpp) and of tokenizer.json (hf_tokenizer.cpp); the
// formats are described in docs/tokenizers.md.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/text/bpe.hpp"
#include "model/text/regex.hpp"
#include "model/text/tokenizer.hpp"

namespace merak::model::text {

// What a Split pre-tokenizer does with the stretches its pattern matches
// (Hugging Face's SplitDelimiterBehavior).
enum class split_behavior { isolated, removed, merged_with_previous, merged_with_next, contiguous };

// One pre-tokenizer step, applied to every piece the steps before it made.
struct pre_tokenizer_step {
  enum class kind { split, byte_level } type = kind::split;
  // split: the pattern; byte_level: GPT-2's pattern when use_regex, else null.
  std::shared_ptr<const unicode_regex> regex;
  split_behavior behavior = split_behavior::isolated;  // split only
  bool invert = false;                                 // split only: keep the other stretches
  bool add_prefix_space = false;                       // byte_level only
};

// GPT-2's pre-tokenizer pattern (openai/gpt-2 encoder.py).
inline constexpr const char* kgpt2_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct added_token {
  std::string content;
  int32_t id;
};

struct byte_level_bpe_config {
  std::string type_name;  // "GPT2BPETokenizer", "HuggingFaceTokenizer"
  std::vector<pre_tokenizer_step> steps;
  std::vector<added_token> added_tokens;  // matched in the text before pre-tokenizing
  // token_bytes[id]: the bytes of vocabulary token `id`; nullopt for an id
  // that only an added token has, or none.
  std::vector<std::optional<std::string>> token_bytes;
  std::optional<int32_t> eod;
};

// The tokenizer of `config` and `model`; vocab_size() is
// max(token_bytes.size(), 1 + the largest added token id).
std::unique_ptr<tokenizer> make_byte_level_bpe(byte_level_bpe_config config, bpe_model model);

}  // namespace merak::model::text
