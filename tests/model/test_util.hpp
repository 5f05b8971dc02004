#pragma once
// Helpers shared by the model tests.

#include <vector>

#include "core/rng.hpp"
#include "model/tensor.hpp"
#include "model/trainer.hpp"

namespace merak::test {

inline model::tensor random_tensor(const model::shape_t& shape, uint64_t seed, float scale = 1.0f) {
  model::tensor t(shape);
  rng r(seed, 99);
  for (auto& x : t.span_f32()) x = float(r.normal()) * scale;
  return t;
}

inline model::tensor random_ids(const model::shape_t& shape, int limit, uint64_t seed) {
  model::tensor t(shape, model::dtype::i32);
  rng r(seed, 98);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int32_t>()[i] = int32_t(r.below(limit));
  return t;
}

// Bytes of a small, repetitive English text (for training tests).
std::vector<uint8_t> small_text(size_t bytes);

// The layout tests' model and data (tests/actors/): a GPT of 4 layers, 32
// channels, 8 heads, 16 positions, batch 16, seed 11; small_text(4000) in
// windows of 16.
model::train_options layout_test_options(int64_t steps);
model::text_corpus layout_test_corpus();
// Every step's loss of `opts` trained on one device over layout_test_corpus().
std::vector<double> single_device_losses(const model::train_options& opts);

}  // namespace merak::test
