#pragma once
// Training data from tokenized datasets on disk (merak train --data-path):
// Megatron indexed datasets or llm.c token files, memory-mapped, blended by
// weight and split into train / valid / test by documents
// (text/gpt_dataset.hpp). Sample g of the run is the row g mod B of step
// g / B, so the samples a run has consumed are step x B and a resumed run
// continues exactly. Validation batches are the valid splits' samples in
// order (no shuffle, the same for every seed). docs/datasets.md describes
// the formats and the rules.

#include <memory>
#include <string>
#include <vector>

#include "model/text/gpt_dataset.hpp"
#include "model/token_source.hpp"

namespace merak::model {

class indexed_corpus final : public token_source {
 public:
  // `data_path`: --data-path's words ("P" or "W1 P1 W2 P2 ..."); `split`:
  // --split; `seq`: T; `vocab`: the model's --vocab, every id read is
  // checked against it. Throws merak::error naming the file and field of a
  // damaged dataset, or the dataset whose train or valid split holds no
  // sample of seq + 1 tokens.
  indexed_corpus(const std::vector<std::string>& data_path, const std::string& split, int seq,
                 int64_t vocab);

  batch train_batch(uint64_t seed, int64_t step, int B, int row0 = 0, int rows = -1) const override;
  batch val_batch(int64_t index, int B) const override;
  int64_t val_batches(int B) const override;
  int seq() const override { return seq_; }
  const std::string& name() const override { return name_; }
  // Ids are checked as they are read (the formats record no vocabulary).
  void check_vocab(int64_t) const override {}

 private:
  batch rows(const text::blend_schedule& blend,
             const std::vector<std::unique_ptr<text::gpt_samples>>& parts, uint64_t seed,
             int64_t first, int count) const;

  int seq_;
  int64_t vocab_;
  std::string name_;
  std::vector<std::unique_ptr<text::gpt_samples>> train_, valid_;
  std::unique_ptr<text::blend_schedule> train_blend_, valid_blend_;
  int64_t valid_samples_ = 0;
};

}  // namespace merak::model
