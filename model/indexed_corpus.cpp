#include "model/indexed_corpus.hpp"

#include <fmt/ranges.h>

#include "core/error.hpp"

namespace merak::model {

indexed_corpus::indexed_corpus(const std::vector<std::string>& data_path, const std::string& split,
                               int seq, int64_t vocab)
    : seq_(seq), vocab_(vocab), name_(fmt::format("{}", fmt::join(data_path, " "))) {
  if (seq < 1) fail("--seq must be at least 1 (got {})", seq);
  const text::data_blend blend = text::parse_data_path(data_path);
  const auto fractions = text::parse_split(split);
  std::vector<double> train_weights, valid_weights;
  for (size_t i = 0; i < blend.prefixes.size(); ++i) {
    const std::string& prefix = blend.prefixes[i];
    auto docs = text::open_documents(prefix);
    const auto at = text::split_documents(fractions, docs->documents());
    train_.push_back(std::make_unique<text::gpt_samples>(
        docs, at[0], at[1], seq, true, fmt::format("the train split of '{}'", prefix)));
    const double weight =
        blend.weights.empty() ? double(train_.back()->tokens()) : blend.weights[i];
    train_weights.push_back(weight);
    if (at[2] > at[1]) {
      try {
        valid_.push_back(std::make_unique<text::gpt_samples>(
            docs, at[1], at[2], seq, false, fmt::format("the valid split of '{}'", prefix)));
        valid_weights.push_back(weight);
        valid_samples_ += valid_.back()->samples_per_epoch();
        continue;
      } catch (const error&) {
        // too short to hold a sample: left out of validation
      }
    }
  }
  if (valid_.empty())
    fail(
        "--split {}: no dataset of --data-path {} has a valid split of one sample of {} tokens "
        "(split by documents: give more documents or a larger valid part)",
        split, name_, seq + 1);
  train_blend_ = std::make_unique<text::blend_schedule>(train_weights);
  valid_blend_ = std::make_unique<text::blend_schedule>(valid_weights);
}

batch indexed_corpus::rows(const text::blend_schedule& blend,
                           const std::vector<std::unique_ptr<text::gpt_samples>>& parts,
                           uint64_t seed, int64_t first, int count) const {
  const int T = seq_;
  batch b{tensor({count, T}, dtype::i32), tensor({count, T}, dtype::i32)};
  int32_t* x = b.tokens.data<int32_t>();
  int32_t* y = b.targets.data<int32_t>();
  std::vector<int32_t> window(size_t(T) + 1);
  for (int r = 0; r < count; ++r) {
    const auto pick = blend.at(first + r);
    parts[size_t(pick.dataset)]->sample(seed, pick.index, window.data(), vocab_);
    std::copy(window.begin(), window.end() - 1, x + int64_t(r) * T);
    std::copy(window.begin() + 1, window.end(), y + int64_t(r) * T);
  }
  return b;
}

batch indexed_corpus::train_batch(uint64_t seed, int64_t step, int B, int row0, int rows) const {
  if (rows < 0) rows = B - row0;
  MERAK_CHECK(row0 >= 0 && row0 + rows <= B && step >= 0, "rows [{}, {}) of a batch of {}", row0,
              row0 + rows, B);
  return this->rows(*train_blend_, train_, seed, step * B + row0, rows);
}

int64_t indexed_corpus::val_batches(int B) const {
  return std::max<int64_t>(1, valid_samples_ / B);
}

batch indexed_corpus::val_batch(int64_t index, int B) const {
  const int64_t first = (index % val_batches(B)) * B;
  return rows(*valid_blend_, valid_, 0, first, B);
}

}  // namespace merak::model
