#pragma once
// Megatron's GPTDataset and BlendedDataset as pure functions: which tokens
// sample g of a run is, from (seed, g) alone, so that a resumed run and a
// data-parallel run read exactly the samples of an uninterrupted one.
//
// A dataset's documents are split into train / valid / test ranges by
// --split (split_documents). Over a range, epoch e is the documents in an
// order shuffled by (seed, e), concatenated; its samples are the windows of
// seq-length + 1 tokens starting every seq-length tokens (so consecutive
// samples share one token and cross document boundaries), and it serves
// them in an order shuffled by (seed, e). Sample g of the range is sample
// g mod n of epoch g / n (n samples per epoch). A blend of datasets picks
// the dataset of each sample by Megatron's greedy weight-following rule.
// The layout and the rules are written down in docs/datasets.md.

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "model/text/document_source.hpp"

namespace merak::model::text {

// --split "969,30,1": up to three non-negative numbers (missing ones are 0),
// normalised to fractions. Fails naming --split and the text.
std::array<double, 3> parse_split(std::string_view text);

// Megatron's _get_split_indices: document boundaries {0, a, b, documents}
// of the train [0, a), valid [a, b) and test [b, documents) ranges.
std::array<int64_t, 4> split_documents(const std::array<double, 3>& split, int64_t documents);

// A permutation of [0, n) keyed by `key`: the image of i (i < n). Pure and
// O(1) in memory (a four-round Feistel network with cycle walking).
uint64_t permute(uint64_t key, uint64_t n, uint64_t i);

class gpt_samples {
 public:
  // Samples of seq + 1 tokens over documents [begin, end) of `docs`;
  // `shuffle` shuffles documents and samples (training), otherwise both keep
  // their order (validation). `label` names the range in errors ("train
  // split of 'P'"). Fails when the range holds fewer than seq + 1 tokens.
  gpt_samples(std::shared_ptr<const document_source> docs, int64_t begin, int64_t end, int seq,
              bool shuffle, std::string label);

  int64_t samples_per_epoch() const { return samples_; }
  int64_t tokens() const { return tokens_; }
  const std::string& label() const { return label_; }

  struct position {
    int64_t document;  // index in the document source
    int64_t offset;    // token offset in that document
  };
  // Where sample g (any g >= 0) starts.
  position locate(uint64_t seed, int64_t g) const;
  // The seq + 1 tokens of sample g into out; ids must be below `vocab`
  // (document_source::read names the file and byte of one that is not).
  // Thread-safe.
  void sample(uint64_t seed, int64_t g, int32_t* out, int64_t vocab) const;

 private:
  // Cumulative token counts of epoch `epoch`'s document order: ends[k] is
  // the tokens of positions 0..k.
  struct epoch_order {
    uint64_t seed;
    int64_t epoch;
    std::vector<int64_t> ends;
  };
  std::shared_ptr<const epoch_order> order(uint64_t seed, int64_t epoch) const;
  int64_t document_at(const epoch_order& o, int64_t k) const;

  std::shared_ptr<const document_source> docs_;
  int64_t begin_, count_;
  int seq_;
  bool shuffle_;
  std::string label_;
  int64_t tokens_ = 0, samples_ = 0;
  mutable std::mutex mutex_;
  mutable std::array<std::shared_ptr<const epoch_order>, 2> cache_;  // the two latest epochs
};

// Megatron's BlendedDataset index: sample g of the blend is sample `index`
// of dataset `dataset`. Megatron's greedy rule (each sample goes to the
// dataset furthest below its weight's share) over a period of 65536
// samples, repeated, so that g maps in O(1).
class blend_schedule {
 public:
  // `weights` positive (normalised here). Fails naming --data-path otherwise.
  explicit blend_schedule(std::vector<double> weights);
  struct pick {
    int dataset;
    int64_t index;
  };
  pick at(int64_t g) const;
  int datasets() const { return int(per_period_.size()); }

  static constexpr int64_t kPeriod = 65536;

 private:
  std::vector<uint16_t> dataset_;  // per position in the period
  std::vector<uint32_t> before_;   // its dataset's samples before it in the period
  std::vector<int64_t> per_period_;
};

// --data-path: "P" or "W1 P1 W2 P2 ...". Without weights several prefixes
// are weighted by their tokens (weights left empty here).
struct data_blend {
  std::vector<double> weights;  // empty: by size
  std::vector<std::string> prefixes;
};
data_blend parse_data_path(const std::vector<std::string>& words);

}  // namespace merak::model::text
