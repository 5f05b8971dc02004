#pragma once
// Deterministic data loading for byte-level language modelling.
//
// The corpus is a file of bytes (vocabulary 256). Its first
// (1 - val_fraction) part trains, the rest validates. Training windows are
// drawn at random from a stream keyed by (seed, step), so the batch of step s
// is a pure function of (seed, s): a resumed run sees exactly the data of an
// uninterrupted one and a data-parallel run can take its rows of the same
// global batch. Validation windows are evenly spaced and fixed.

#include <cstdint>
#include <string>
#include <vector>

#include "model/tensor.hpp"

namespace merak::model {

struct batch {
  tensor tokens;   // (B, T) i32
  tensor targets;  // (B, T) i32, tokens shifted by one
};

class text_corpus {
 public:
  // Reads `path`. Throws merak::error naming the file if it is missing,
  // unreadable or empty, or if the split leaves fewer than seq + 1 bytes in
  // either part.
  text_corpus(const std::string& path, int seq, double val_fraction = 0.1);
  // From bytes already in memory (tests, synthetic benchmarks).
  text_corpus(std::vector<uint8_t> bytes, int seq, double val_fraction, std::string name);

  // Global training batch of `step`: rows [row0, row0 + rows) of the B rows.
  batch train_batch(uint64_t seed, int64_t step, int B, int row0 = 0, int rows = -1) const;
  // Validation batch `index` (0-based) of B evenly spaced windows.
  batch val_batch(int64_t index, int B) const;
  // How many distinct validation batches of size B fit.
  int64_t val_batches(int B) const;

  int seq() const { return seq_; }
  int64_t train_size() const { return split_; }
  int64_t val_size() const { return int64_t(bytes_.size()) - split_; }
  const std::string& name() const { return name_; }

 private:
  void init(double val_fraction);
  batch windows(const std::vector<int64_t>& starts) const;

  std::vector<uint8_t> bytes_;
  int seq_;
  int64_t split_ = 0;
  std::string name_;
};

}  // namespace merak::model
