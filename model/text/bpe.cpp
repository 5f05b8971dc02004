#include "model/text/bpe.hpp"

#include <queue>

#include "core/error.hpp"

namespace merak::model::text {

namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return uint64_t(uint32_t(left)) << 32 | uint32_t(right);
}

// A multiplicative hash (Fibonacci hashing of the 64-bit key).
uint64_t mix(uint64_t key) {
  return (key * 0x9E3779B97F4A7C15ull) >> 20;
}

}  // namespace

bpe_model::bpe_model(std::vector<int32_t> byte_tokens,
                     std::unordered_map<std::string, int32_t> vocabulary,
                     const std::vector<bpe_merge>& merges, bool ignore_merges)
    : byte_tokens_(std::move(byte_tokens)), ignore_merges_(ignore_merges) {
  MERAK_CHECK(byte_tokens_.size() == 256);
  vocabulary_.reserve(vocabulary.size());
  for (auto& [bytes, id] : vocabulary) vocabulary_.emplace(bytes, id);
  size_t capacity = 16;
  while (capacity < merges.size() * 2) capacity *= 2;
  table_.assign(capacity, merge_entry{kempty, -1, -1});
  mask_ = capacity - 1;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& m = merges[rank];
    const uint64_t key = pair_key(m.left, m.right);
    uint64_t slot = mix(key) & mask_;
    while (table_[slot].key != kempty && table_[slot].key != key) slot = (slot + 1) & mask_;
    if (table_[slot].key == key)
      fail("merge {} repeats merge {} (every pair may be merged once)", rank, table_[slot].rank);
    table_[slot] = merge_entry{key, int32_t(rank), m.merged};
  }
}

const bpe_model::merge_entry* bpe_model::lookup(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  for (uint64_t slot = mix(key) & mask_;; slot = (slot + 1) & mask_) {
    const merge_entry& e = table_[slot];
    if (e.key == key) return &e;
    if (e.key == kempty) return nullptr;
  }
}

int32_t bpe_model::find(std::string_view bytes) const {
  auto it = vocabulary_.find(bytes);
  return it == vocabulary_.end() ? -1 : it->second;
}

void bpe_model::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() == 1) {
    out.push_back(byte_tokens_[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (ignore_merges_) {
    if (int32_t id = find(word); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  if (word.size() <= kshort_word)
    encode_short_word(word, out);
  else
    encode_long_word(word, out);
}

void bpe_model::encode_short_word(std::string_view word, std::vector<int32_t>& out) const {
  // symbols[i] and the rank/result of the pair (symbols[i], symbols[i+1]).
  int32_t symbols[kshort_word], ranks[kshort_word], merged[kshort_word];
  size_t n = word.size();
  MERAK_CHECK(n <= kshort_word);
  for (size_t i = 0; i < n; ++i) symbols[i] = byte_tokens_[static_cast<unsigned char>(word[i])];
  auto rank_pair = [&](size_t i) {
    const merge_entry* e = lookup(symbols[i], symbols[i + 1]);
    ranks[i] = e ? e->rank : INT32_MAX;
    merged[i] = e ? e->merged : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) rank_pair(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (ranks[i] < ranks[best]) best = i;
    if (ranks[best] == INT32_MAX) break;
    symbols[best] = merged[best];
    for (size_t i = best + 1; i + 1 < n; ++i) symbols[i] = symbols[i + 1];
    for (size_t i = best + 1; i + 2 < n; ++i) {
      ranks[i] = ranks[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best > 0) rank_pair(best - 1);
    if (best + 1 < n) rank_pair(best);
  }
  out.insert(out.end(), symbols, symbols + n);
}

void bpe_model::encode_long_word(std::string_view word, std::vector<int32_t>& out) const {
  struct symbol {
    int32_t id, prev, next;  // id -1: merged into its left neighbour
  };
  struct candidate {
    int32_t rank, pos, left, right;
    bool operator>(const candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  const int32_t n = int32_t(word.size());
  std::vector<symbol> symbols(size_t(n), symbol{});
  for (int32_t i = 0; i < n; ++i)
    symbols[size_t(i)] = {byte_tokens_[static_cast<unsigned char>(word[size_t(i)])], i - 1,
                          i + 1 < n ? i + 1 : -1};
  std::priority_queue<candidate, std::vector<candidate>, std::greater<>> queue;
  auto push = [&](int32_t pos) {
    const int32_t next = symbols[size_t(pos)].next;
    if (next < 0) return;
    const int32_t left = symbols[size_t(pos)].id, right = symbols[size_t(next)].id;
    if (const merge_entry* e = lookup(left, right)) queue.push({e->rank, pos, left, right});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    const candidate c = queue.top();
    queue.pop();
    symbol& s = symbols[size_t(c.pos)];
    // A stale candidate: its left or right symbol changed since it was pushed.
    if (s.id != c.left || s.next < 0 || symbols[size_t(s.next)].id != c.right) continue;
    const merge_entry* e = lookup(c.left, c.right);
    symbol& gone = symbols[size_t(s.next)];
    s.id = e->merged;
    s.next = gone.next;
    if (gone.next >= 0) symbols[size_t(gone.next)].prev = c.pos;
    gone.id = -1;
    if (s.prev >= 0) push(s.prev);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = symbols[size_t(i)].next) out.push_back(symbols[size_t(i)].id);
}

}  // namespace merak::model::text
