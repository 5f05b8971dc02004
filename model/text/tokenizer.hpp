#pragma once
// Text tokenizers: text to token ids and back, chosen by Megatron-LM's
// --tokenizer-type names. Every tokenizer is immutable once built, so one
// instance may encode from many threads at once.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace merak::model::text {

class tokenizer {
 public:
  virtual ~tokenizer() = default;
  // Token ids of `text`, each in [0, vocab_size()).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // The text of `ids`; fails naming the first id outside the vocabulary.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // Ids are in [0, vocab_size()) (before any padding of the model's
  // embedding to --make-vocab-size-divisible-by).
  virtual int64_t vocab_size() const = 0;
  // The end-of-document id that --append-eod appends, if the vocabulary has one.
  virtual std::optional<int32_t> eod() const = 0;
  // Megatron's --tokenizer-type name: "ByteTokenizer", "GPT2BPETokenizer", ...
  virtual std::string_view type_name() const = 0;
};

// What selects and builds a tokenizer: Megatron-LM's flags.
struct tokenizer_options {
  std::string type = "ByteTokenizer";  // --tokenizer-type
  std::string vocab_file;              // --vocab-file (GPT2BPETokenizer: encoder.json)
  std::string merge_file;              // --merge-file (GPT2BPETokenizer: vocab.bpe)
  std::string tokenizer_model;         // --tokenizer-model (tokenizer.json or a .model)
};

// Builds the tokenizer `options` name; fails naming the flag and file for an
// unknown type, a missing file or a damaged one.
std::unique_ptr<tokenizer> make_tokenizer(const tokenizer_options& options);

// GPT2BPETokenizer: OpenAI's encoder.json and vocab.bpe (docs/tokenizers.md).
// Throws merak::error naming the flag, the file and the entry or line.
std::unique_ptr<tokenizer> make_gpt2_bpe_tokenizer(const std::string& vocab_file,
                                                   const std::string& merge_file);

// HuggingFaceTokenizer: a tokenizer.json with a byte-level BPE model
// (docs/tokenizers.md lists what is supported). Added tokens, special ones
// included, are matched in the text. Throws merak::error naming the file
// and the JSON path of what is damaged or unsupported.
std::unique_ptr<tokenizer> make_huggingface_tokenizer(const std::string& path);

// SentencePieceTokenizer: a SentencePiece .model; eod() is its eos id.
// Throws merak::error naming the file when it cannot be loaded.
std::unique_ptr<tokenizer> make_sentencepiece_tokenizer(const std::string& path);

// Every byte is a token: vocabulary 256 (no end-of-document id). The
// default, and what `merak train --data FILE` has always trained on.
std::unique_ptr<tokenizer> make_byte_tokenizer();

}  // namespace merak::model::text
