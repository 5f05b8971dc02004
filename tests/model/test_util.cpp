#include "tests/model/test_util.hpp"

#include <string>

namespace merak::test {

std::vector<uint8_t> small_text(size_t bytes) {
  static const std::string verses =
      "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money "
      "in my purse, and nothing particular to interest me on shore, I thought I would sail about "
      "a little and see the watery part of the world. ";
  std::vector<uint8_t> out;
  while (out.size() < bytes) out.insert(out.end(), verses.begin(), verses.end());
  out.resize(bytes);
  return out;
}

model::train_options layout_test_options(int64_t steps) {
  model::train_options o;
  o.model = {.vocab = 256, .max_seq = 16, .layers = 4, .dim = 32, .heads = 8};
  o.batch = 16;
  o.steps = steps;
  o.lr = 3e-3f;
  o.warmup = 3;
  o.seed = 11;
  return o;
}

model::text_corpus layout_test_corpus() {
  return model::text_corpus(small_text(4000), 16, 0.1, "tiny");
}

std::vector<double> single_device_losses(const model::train_options& opts) {
  model::trainer tr(opts, layout_test_corpus());
  std::vector<double> out;
  while (!tr.done()) out.push_back(tr.train_step().loss);
  return out;
}

}  // namespace merak::test
