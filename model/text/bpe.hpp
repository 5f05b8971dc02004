#pragma once
// Byte-pair encoding over raw bytes: a word's bytes start as single-byte
// tokens, then the adjacent pair with the lowest merge rank is merged (the
// leftmost among equal ranks), one merge at a time, until no adjacent pair
// has a merge. This is the merge order of Hugging Face's tokenizers and of
// transformers.js; for merge lists in which every merge's parts are made by
// earlier merges (all published ones) it also equals openai/gpt-2's
// "merge every occurrence of the best pair" loop.

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace merak::model::text {

// One merge: tokens `left` and `right` (ids) become `merged`; its rank is
// its index in the list the model is built from.
struct bpe_merge {
  int32_t left, right, merged;
};

class bpe_model {
 public:
  // `byte_tokens[b]` is the id of the one-byte token b (all 256 must
  // exist: the caller names the missing one); `vocabulary` maps each
  // token's bytes to its id. Throws merak::error naming the index of a
  // merge that repeats an earlier pair. With `ignore_merges`, a word that is itself in
  // the vocabulary is that token without merging (Hugging Face's option).
  bpe_model(std::vector<int32_t> byte_tokens, std::unordered_map<std::string, int32_t> vocabulary,
            const std::vector<bpe_merge>& merges, bool ignore_merges);

  // Appends the ids of `word` (raw bytes, not empty) to `out`. Words up to
  // kshort_word bytes merge by rescanning, longer ones through a priority
  // queue (O(n log n), for runs such as a megabyte of spaces); both give
  // the same ids.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  void encode_short_word(std::string_view word, std::vector<int32_t>& out) const;
  void encode_long_word(std::string_view word, std::vector<int32_t>& out) const;
  static constexpr size_t kshort_word = 48;

  // The id of the token whose bytes are `bytes`, or -1.
  int32_t find(std::string_view bytes) const;

 private:
  struct merge_entry {
    uint64_t key;  // left << 32 | right; kempty: a free slot
    int32_t rank;
    int32_t merged;
  };
  static constexpr uint64_t kempty = ~uint64_t(0);
  // {rank, merged id} of the pair, or rank -1.
  const merge_entry* lookup(int32_t left, int32_t right) const;

  std::vector<int32_t> byte_tokens_;
  struct string_hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int32_t, string_hash, std::equal_to<>> vocabulary_;
  std::vector<merge_entry> table_;  // open addressing, power-of-two size, linear probing
  uint64_t mask_ = 0;
  bool ignore_merges_;
};

}  // namespace merak::model::text
