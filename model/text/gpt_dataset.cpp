#include "model/text/gpt_dataset.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>

#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace merak::model::text {
namespace {

constexpr uint64_t kDocumentStream = 0x646f'6373'0000ull;  // "docs"
constexpr uint64_t kSampleStream = 0x7361'6d70'0000ull;    // "samp"

uint64_t epoch_key(uint64_t seed, uint64_t stream, int64_t epoch) {
  return mix64(seed ^ mix64(stream + uint64_t(epoch) * 0x9E3779B97F4A7C15ull));
}

// A number, or nullopt when `text` is not one (all of it).
std::optional<double> parse_number(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

}  // namespace

std::array<double, 3> parse_split(std::string_view text) {
  std::array<double, 3> out{0, 0, 0};
  size_t n = 0;
  std::string_view rest = text;
  while (true) {
    const size_t comma = rest.find(',');
    const auto v = parse_number(rest.substr(0, comma));
    if (!v || !(*v >= 0) || !std::isfinite(*v) || n == 3)
      fail("--split '{}': expected up to three non-negative numbers separated by commas", text);
    out[n++] = *v;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  const double sum = out[0] + out[1] + out[2];
  if (!(sum > 0)) fail("--split '{}': the parts sum to 0", text);
  for (double& v : out) v /= sum;
  return out;
}

std::array<int64_t, 4> split_documents(const std::array<double, 3>& split, int64_t documents) {
  std::array<int64_t, 4> at{0, 0, 0, 0};
  for (int i = 0; i < 3; ++i)
    at[size_t(i) + 1] =
        at[size_t(i)] + int64_t(std::nearbyint(split[size_t(i)] * double(documents)));
  // nearbyint: Python's round (halves to even). Megatron shifts every boundary by the rounding's
  // excess at the end.
  const int64_t excess = at[3] - documents;
  for (int i = 1; i < 4; ++i)
    at[size_t(i)] = std::clamp<int64_t>(at[size_t(i)] - excess, 0, documents);
  return at;
}

uint64_t permute(uint64_t key, uint64_t n, uint64_t i) {
  MERAK_CHECK(i < n, "permute: {} is outside [0, {})", i, n);
  if (n <= 1) return 0;
  const int bits = 64 - __builtin_clzll(n - 1);
  const int half = (bits + 1) / 2;
  const uint64_t mask = (uint64_t(1) << half) - 1;
  uint64_t x = i;
  do {  // cycle walking: the network permutes [0, 2^(2 half)), at most 4n
    uint64_t left = x >> half, right = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t f = mix64(key ^ mix64(right + (round << 56))) & mask;
      const uint64_t next = left ^ f;
      left = right;
      right = next;
    }
    x = (left << half) | right;
  } while (x >= n);
  return x;
}

// ---- gpt_samples ------------------------------------------------------------

gpt_samples::gpt_samples(std::shared_ptr<const document_source> docs, int64_t begin, int64_t end,
                         int seq, bool shuffle, std::string label)
    : docs_(std::move(docs)),
      begin_(begin),
      count_(end - begin),
      seq_(seq),
      shuffle_(shuffle),
      label_(std::move(label)) {
  MERAK_CHECK(begin >= 0 && begin <= end && end <= docs_->documents(), "documents [{}, {})", begin,
              end);
  MERAK_CHECK(seq >= 1, "seq {}", seq);
  for (int64_t d = begin; d < end; ++d)
    if (__builtin_add_overflow(tokens_, docs_->document_tokens(d), &tokens_))
      fail("{}: its token count overflows 64 bits", label_);
  samples_ = tokens_ > 0 ? (tokens_ - 1) / seq_ : 0;
  if (samples_ < 1)
    fail("{} (documents [{}, {})) has {} tokens: fewer than one sample of seq-length + 1 = {}",
         label_, begin, end, tokens_, seq_ + 1);
}

int64_t gpt_samples::document_at(const epoch_order& o, int64_t k) const {
  return begin_ + (shuffle_ ? int64_t(permute(epoch_key(o.seed, kDocumentStream, o.epoch),
                                              uint64_t(count_), uint64_t(k)))
                            : k);
}

std::shared_ptr<const gpt_samples::epoch_order> gpt_samples::order(uint64_t seed,
                                                                   int64_t epoch) const {
  if (!shuffle_) {  // one order for every epoch and seed
    seed = 0;
    epoch = 0;
  }
  {
    std::lock_guard lock(mutex_);
    for (auto& c : cache_)
      if (c && c->seed == seed && c->epoch == epoch) return c;
  }
  auto o = std::make_shared<epoch_order>();
  o->seed = seed;
  o->epoch = epoch;
  o->ends.resize(size_t(count_));
  int64_t sum = 0;
  for (int64_t k = 0; k < count_; ++k) {
    sum += docs_->document_tokens(document_at(*o, k));
    o->ends[size_t(k)] = sum;
  }
  std::lock_guard lock(mutex_);
  cache_[1] = std::move(cache_[0]);
  cache_[0] = o;
  return o;
}

gpt_samples::position gpt_samples::locate(uint64_t seed, int64_t g) const {
  MERAK_CHECK(g >= 0, "sample {}", g);
  const int64_t epoch = g / samples_, i = g % samples_;
  const auto o = order(seed, epoch);
  const int64_t j =
      shuffle_
          ? int64_t(permute(epoch_key(seed, kSampleStream, epoch), uint64_t(samples_), uint64_t(i)))
          : i;
  const int64_t start = j * seq_;
  // The first position whose documents end past `start` (empty ones skipped).
  const auto it = std::upper_bound(o->ends.begin(), o->ends.end(), start);
  const int64_t k = it - o->ends.begin();
  const int64_t before = k > 0 ? o->ends[size_t(k) - 1] : 0;
  return {k, start - before};  // document as a position of the epoch's order
}

void gpt_samples::sample(uint64_t seed, int64_t g, int32_t* out, int64_t vocab) const {
  const auto pos = locate(seed, g);
  const auto o = order(seed, g / samples_);
  int64_t k = pos.document, offset = pos.offset, need = int64_t(seq_) + 1;
  while (need > 0) {
    MERAK_CHECK(k < count_, "{}: sample {} runs past the epoch", label_, g);
    const int64_t d = document_at(*o, k);
    const int64_t take = std::min(need, docs_->document_tokens(d) - offset);
    if (take > 0) docs_->read(d, offset, take, out, vocab);
    out += take;
    need -= take;
    offset = 0;
    ++k;
  }
}

// ---- blends ----------------------------------------------------------------

blend_schedule::blend_schedule(std::vector<double> weights) {
  if (weights.empty() || weights.size() > 65535)
    fail("--data-path: a blend has 1 to 65535 datasets (got {})", weights.size());
  double sum = 0;
  for (double w : weights) {
    if (!(w > 0) || !std::isfinite(w)) fail("--data-path: weight {} is not a positive number", w);
    sum += w;
  }
  for (double& w : weights) w /= sum;
  per_period_.assign(weights.size(), 0);
  dataset_.resize(kPeriod);
  before_.resize(kPeriod);
  // Megatron's build_blending_indices (helpers.cpp).
  for (int64_t i = 0; i < kPeriod; ++i) {
    const double at = std::max(double(i), 1.0);
    size_t best = 0;
    double best_error = weights[0] * at - double(per_period_[0]);
    for (size_t d = 1; d < weights.size(); ++d) {
      const double e = weights[d] * at - double(per_period_[d]);
      if (e > best_error) {
        best = d;
        best_error = e;
      }
    }
    dataset_[size_t(i)] = uint16_t(best);
    before_[size_t(i)] = uint32_t(per_period_[best]);
    ++per_period_[best];
  }
}

blend_schedule::pick blend_schedule::at(int64_t g) const {
  MERAK_CHECK(g >= 0, "sample {}", g);
  const int64_t period = g / kPeriod, j = g % kPeriod;
  const int d = dataset_[size_t(j)];
  return {d, period * per_period_[size_t(d)] + int64_t(before_[size_t(j)])};
}

data_blend parse_data_path(const std::vector<std::string>& words) {
  if (words.empty()) fail("--data-path needs a prefix, or weight and prefix pairs");
  data_blend b;
  if (words.size() % 2 == 0) {
    bool all = true, any = false;
    for (size_t i = 0; i < words.size(); i += 2) {
      const bool number = parse_number(words[i]).has_value();
      all = all && number;
      any = any || number;
    }
    if (all) {
      for (size_t i = 0; i < words.size(); i += 2) {
        b.weights.push_back(*parse_number(words[i]));
        b.prefixes.push_back(words[i + 1]);
      }
      blend_schedule check(b.weights);  // fails naming a bad weight
      return b;
    }
    if (any)
      fail(
          "--data-path: '{}' mixes weights and prefixes (give a weight before every prefix, or "
          "none)",
          fmt::join(words, " "));
  }
  for (const auto& w : words) {
    if (parse_number(w)) fail("--data-path: '{}' looks like a weight without a prefix", w);
    b.prefixes.push_back(w);
  }
  return b;
}

}  // namespace merak::model::text
