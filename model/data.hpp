#pragma once
// Deterministic data loading for language modelling.
//
// The corpus is a file read whole and turned into token ids by a tokenizer:
//   bytes: every byte is a token (vocabulary 256);
//   words: hashed words (tokenize_hashed_words): a vocabulary of any size V,
//          so that a model has a large, row-sparse token embedding.
// The token sequence's first (1 - val_fraction) part trains, the rest
// validates. Training windows are
// drawn at random from a stream keyed by (seed, step), so the batch of step s
// is a pure function of (seed, s): a resumed run sees exactly the data of an
// uninterrupted one and a data-parallel run can take its rows of the same
// global batch. Validation windows are evenly spaced and fixed.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/token_source.hpp"

namespace merak::model {

enum class tokenizer { bytes, words };

// "bytes", "words"; parse_tokenizer fails naming --tokenizer and the text.
std::string_view tokenizer_name(tokenizer t);
tokenizer parse_tokenizer(std::string_view text);

// The `words` tokenizer: a word is a maximal run of ASCII letters, digits
// and apostrophes, lowercased; every other byte that is not whitespace
// (punctuation, and each byte of a non-ASCII character) is a token of its
// own; whitespace separates tokens and is dropped. A token's id is its
// 64-bit FNV-1a hash modulo `vocab`, so the ids are a pure function of the
// text (no vocabulary file, the same ids in training and validation) and
// distinct words may share an id. Fails if vocab < 2.
std::vector<int32_t> tokenize_hashed_words(std::string_view text, int vocab);

// The most text read from a pipe (or another file whose size is not known
// in advance) as --data: it is held in memory whole, with its tokens.
inline constexpr int64_t kmost_piped_text = int64_t(1) << 30;

// The bytes of data file `path`. A regular file must fit, with its tokens
// (5 bytes per byte), in the memory this process may use
// (core/process_stats.hpp); other files (a pipe) are read up to
// kmost_piped_text bytes, or that memory if less. Beyond, fails naming the
// file and the bound, before reading (a regular file) or once past it.
std::vector<uint8_t> read_text_file(const std::string& path);

class text_corpus final : public token_source {
 public:
  // Reads `path` and tokenizes it (`vocab`: the words tokenizer's V; the
  // bytes tokenizer ignores it). Throws merak::error naming the file if it is
  // missing, unreadable or empty, or if the split leaves fewer than seq + 1
  // tokens in either part.
  text_corpus(const std::string& path, int seq, double val_fraction = 0.1,
              tokenizer tok = tokenizer::bytes, int vocab = 256);
  // From bytes already in memory (tests, synthetic benchmarks).
  text_corpus(std::vector<uint8_t> bytes, int seq, double val_fraction, std::string name,
              tokenizer tok = tokenizer::bytes, int vocab = 256);

  // Global training batch of `step`: rows [row0, row0 + rows) of the B rows.
  batch train_batch(uint64_t seed, int64_t step, int B, int row0 = 0, int rows = -1) const override;
  // Validation batch `index` (0-based) of B evenly spaced windows.
  batch val_batch(int64_t index, int B) const override;
  // How many distinct validation batches of size B fit.
  int64_t val_batches(int B) const override;
  // A words corpus's ids are below its vocab(); a bytes corpus is not
  // checked (the embedding refuses a byte above the vocabulary itself).
  void check_vocab(int64_t model_vocab) const override;

  int seq() const override { return seq_; }
  int64_t train_size() const { return split_; }  // tokens
  int64_t val_size() const { return int64_t(tokens_.size()) - split_; }
  const std::string& name() const override { return name_; }
  tokenizer tokens_kind() const { return tok_; }
  // Token ids are in [0, vocab()): 256 for bytes, V for words.
  int vocab() const { return vocab_; }

 private:
  void init(std::vector<uint8_t> bytes, double val_fraction);
  batch windows(const std::vector<int64_t>& starts) const;

  std::vector<int32_t> tokens_;
  int seq_;
  tokenizer tok_;
  int vocab_;
  int64_t split_ = 0;
  std::string name_;
};

}  // namespace merak::model
