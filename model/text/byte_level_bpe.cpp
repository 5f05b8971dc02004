#include "model/text/byte_level_bpe.hpp"

#include <algorithm>
#include <array>
#include <deque>
#include <unordered_map>

#include "core/error.hpp"
#include "model/text/unicode.hpp"

namespace merak::model::text {

namespace {

using range = std::pair<size_t, size_t>;

// The pieces `step` makes of `piece`, appended to `out`; strings it creates
// (a prefix space) live in `arena`.
void apply_split(const pre_tokenizer_step& step, std::string_view piece,
                 std::vector<std::string_view>& out, std::vector<range>& matches) {
  matches.clear();
  step.regex->find_all(piece, matches);
  // (begin, end, is delimiter) covering `piece`.
  struct stretch {
    size_t begin, end;
    bool delimiter;
  };
  std::vector<stretch> all;
  all.reserve(matches.size() * 2 + 1);
  size_t at = 0;
  for (auto [b, e] : matches) {
    if (b > at) all.push_back({at, b, step.invert});
    all.push_back({b, e, !step.invert});
    at = e;
  }
  if (at < piece.size()) all.push_back({at, piece.size(), step.invert});

  std::vector<stretch> kept;
  kept.reserve(all.size());
  bool previous_delimiter = false;
  switch (step.behavior) {
    case split_behavior::isolated:
      kept = all;
      break;
    case split_behavior::removed:
      for (auto& s : all)
        if (!s.delimiter) kept.push_back(s);
      break;
    case split_behavior::merged_with_previous:
      for (auto& s : all) {
        if (s.delimiter && !previous_delimiter && !kept.empty())
          kept.back().end = s.end;
        else
          kept.push_back(s);
        previous_delimiter = s.delimiter;
      }
      break;
    case split_behavior::merged_with_next:
      for (auto it = all.rbegin(); it != all.rend(); ++it) {
        if (it->delimiter && !previous_delimiter && !kept.empty())
          kept.back().begin = it->begin;
        else
          kept.push_back(*it);
        previous_delimiter = it->delimiter;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    case split_behavior::contiguous:
      for (size_t i = 0; i < all.size(); ++i) {
        if (i > 0 && all[i].delimiter == previous_delimiter)
          kept.back().end = all[i].end;
        else
          kept.push_back(all[i]);
        previous_delimiter = all[i].delimiter;
      }
      break;
  }
  for (auto& s : kept)
    if (s.end > s.begin) out.push_back(piece.substr(s.begin, s.end - s.begin));
}

class byte_level_bpe final : public tokenizer {
 public:
  byte_level_bpe(byte_level_bpe_config config, bpe_model model)
      : config_(std::move(config)), model_(std::move(model)) {
    vocab_size_ = int64_t(config_.token_bytes.size());
    for (auto& t : config_.added_tokens) vocab_size_ = std::max<int64_t>(vocab_size_, t.id + 1);
    decode_table_.resize(size_t(vocab_size_));
    for (size_t id = 0; id < config_.token_bytes.size(); ++id)
      decode_table_[id] = config_.token_bytes[id];
    for (auto& t : config_.added_tokens) decode_table_[size_t(t.id)] = t.content;
    // Longest first within each first byte: the first that matches is the longest.
    std::stable_sort(config_.added_tokens.begin(), config_.added_tokens.end(),
                     [](const added_token& a, const added_token& b) {
                       return a.content.size() > b.content.size();
                     });
    for (auto& t : config_.added_tokens)
      if (!t.content.empty()) starts_added_[static_cast<unsigned char>(t.content[0])] = true;
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    check_utf8(text, std::string(config_.type_name) + ": the text");
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3);
    scratch s;
    size_t segment_start = 0;
    for (size_t i = 0; i < text.size();) {
      const added_token* hit = nullptr;
      if (starts_added_[static_cast<unsigned char>(text[i])]) {
        for (auto& t : config_.added_tokens)
          if (t.content[0] == text[i] && text.compare(i, t.content.size(), t.content) == 0) {
            hit = &t;
            break;
          }
      }
      if (!hit) {
        ++i;
        continue;
      }
      encode_segment(text.substr(segment_start, i - segment_start), ids, s);
      ids.push_back(hit->id);
      i += hit->content.size();
      segment_start = i;
    }
    encode_segment(text.substr(segment_start), ids, s);
    return ids;
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= vocab_size_ || !decode_table_[size_t(ids[i])])
        fail("{}: id {} at position {} is not a token of the vocabulary (size {})",
             config_.type_name, ids[i], i, vocab_size_);
      out += *decode_table_[size_t(ids[i])];
    }
    return out;
  }

  int64_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> eod() const override { return config_.eod; }
  std::string_view type_name() const override { return config_.type_name; }

 private:
  // Buffers reused across the segments of one encode call, and its word
  // cache: the ids of each distinct word seen so far in this call (keys
  // point into the text or the arena, which outlive the call's words).
  // Local to the call, so encode stays safe from many threads.
  struct scratch {
    std::vector<std::string_view> pieces, next;
    std::vector<range> matches;
    std::deque<std::string> arena;
    std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> words;
    std::vector<int32_t> word_ids;  // the cached words' ids, back to back
  };

  void encode_word(std::string_view word, std::vector<int32_t>& ids, scratch& s) const {
    if (word.size() == 1) {
      model_.encode_word(word, ids);
      return;
    }
    auto [it, fresh] = s.words.try_emplace(word);
    if (fresh) {
      const size_t first = s.word_ids.size();
      model_.encode_word(word, s.word_ids);
      it->second = {uint32_t(first), uint32_t(s.word_ids.size() - first)};
    }
    const int32_t* begin = s.word_ids.data() + it->second.first;
    ids.insert(ids.end(), begin, begin + it->second.second);
  }

  void encode_segment(std::string_view segment, std::vector<int32_t>& ids, scratch& s) const {
    if (segment.empty()) return;
    s.pieces.assign(1, segment);
    for (const auto& step : config_.steps) {
      s.next.clear();
      for (std::string_view piece : s.pieces) {
        if (step.type == pre_tokenizer_step::kind::byte_level) {
          if (step.add_prefix_space && piece.front() != ' ') {
            s.arena.push_back(" " + std::string(piece));
            piece = s.arena.back();
          }
          if (!step.regex) {
            s.next.push_back(piece);
            continue;
          }
        }
        apply_split(step, piece, s.next, s.matches);
      }
      std::swap(s.pieces, s.next);
    }
    for (std::string_view piece : s.pieces) encode_word(piece, ids, s);
  }

  byte_level_bpe_config config_;
  bpe_model model_;
  int64_t vocab_size_ = 0;
  std::vector<std::optional<std::string>> decode_table_;
  std::array<bool, 256> starts_added_{};
};

}  // namespace

std::unique_ptr<tokenizer> make_byte_level_bpe(byte_level_bpe_config config, bpe_model model) {
  return std::make_unique<byte_level_bpe>(std::move(config), std::move(model));
}

}  // namespace merak::model::text
