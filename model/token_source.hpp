#pragma once
// Where the trainers' batches come from: a text file held in memory
// (text_corpus, data.hpp) or memory-mapped token datasets (indexed_corpus,
// indexed_corpus.hpp). The batch of step s is a pure function of (seed, s),
// so that a resumed run sees exactly the data of an uninterrupted one and a
// data-parallel run takes its rows of the same global batch.

#include <cstdint>
#include <string>

#include "model/tensor.hpp"

namespace merak::model {

struct batch {
  tensor tokens;   // (B, T) i32
  tensor targets;  // (B, T) i32, tokens shifted by one
};

class token_source {
 public:
  virtual ~token_source() = default;
  // Global training batch of `step`: rows [row0, row0 + rows) of the B rows
  // (rows < 0: to the end). Throws merak::error naming the file when the
  // data is damaged (an id outside the vocabulary).
  virtual batch train_batch(uint64_t seed, int64_t step, int B, int row0 = 0,
                            int rows = -1) const = 0;
  // Validation batch `index` (0-based, wrapping at val_batches(B)).
  virtual batch val_batch(int64_t index, int B) const = 0;
  // How many distinct validation batches of size B there are (at least 1).
  virtual int64_t val_batches(int B) const = 0;
  // The sequence length T of a batch's rows.
  virtual int seq() const = 0;
  // What checkpoints record and errors name: the file or the prefixes.
  virtual const std::string& name() const = 0;
  // Fails naming the data when its ids cannot all be below `model_vocab`
  // (what can be known without reading every token).
  virtual void check_vocab(int64_t model_vocab) const = 0;
};

}  // namespace merak::model
