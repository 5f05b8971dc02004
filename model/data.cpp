#include "model/data.hpp"

#include <algorithm>
#include <fstream>
#include <iterator>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace merak::model {
namespace {
constexpr uint64_t kTrainStream = 0x7472'6169'6e00ull;  // "train"
}

text_corpus::text_corpus(const std::string& path, int seq, double val_fraction)
    : seq_(seq), name_(path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open data file '{}'", path);
  bytes_.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  if (f.bad()) fail("error reading data file '{}'", path);
  init(val_fraction);
}

text_corpus::text_corpus(std::vector<uint8_t> bytes, int seq, double val_fraction, std::string name)
    : bytes_(std::move(bytes)), seq_(seq), name_(std::move(name)) {
  init(val_fraction);
}

void text_corpus::init(double val_fraction) {
  if (bytes_.empty()) fail("data file '{}' is empty", name_);
  if (seq_ < 1) fail("--seq must be at least 1 (got {})", seq_);
  if (!(val_fraction > 0 && val_fraction < 1))
    fail("validation fraction must be in (0, 1) (got {})", val_fraction);
  split_ = int64_t(double(bytes_.size()) * (1.0 - val_fraction));
  if (split_ < seq_ + 1 || int64_t(bytes_.size()) - split_ < seq_ + 1)
    fail(
        "data file '{}' has {} bytes: too short for --seq {} (each of the training and validation "
        "parts needs at least {} bytes)",
        name_, bytes_.size(), seq_, seq_ + 1);
}

batch text_corpus::windows(const std::vector<int64_t>& starts) const {
  int B = int(starts.size()), T = seq_;
  batch b{tensor({B, T}, dtype::i32), tensor({B, T}, dtype::i32)};
  int32_t* x = b.tokens.data<int32_t>();
  int32_t* y = b.targets.data<int32_t>();
  for (int r = 0; r < B; ++r)
    for (int t = 0; t < T; ++t) {
      x[r * T + t] = bytes_[starts[r] + t];
      y[r * T + t] = bytes_[starts[r] + t + 1];
    }
  return b;
}

batch text_corpus::train_batch(uint64_t seed, int64_t step, int B, int row0, int rows) const {
  if (rows < 0) rows = B - row0;
  MERAK_CHECK(row0 >= 0 && row0 + rows <= B, "rows [{}, {}) of a batch of {}", row0, row0 + rows,
              B);
  // One stream per step; row r takes draw r, whichever rows are asked for.
  rng r(seed, kTrainStream ^ uint64_t(step) * 0x9E3779B97F4A7C15ull);
  const uint64_t span = uint64_t(split_ - seq_);  // start in [0, split - T - 1]
  std::vector<int64_t> starts;
  for (int i = 0; i < row0 + rows; ++i) {
    int64_t s = int64_t(r.below(span));
    if (i >= row0) starts.push_back(s);
  }
  return windows(starts);
}

int64_t text_corpus::val_batches(int B) const {
  int64_t windows_fit = (val_size() - 1) / seq_;
  return std::max<int64_t>(1, windows_fit / B);
}

batch text_corpus::val_batch(int64_t index, int B) const {
  // Windows evenly spaced over the validation part, batch `index` taking
  // every val_batches(B)-th of them.
  int64_t nb = val_batches(B);
  int64_t total = nb * B;
  int64_t room = val_size() - seq_ - 1;
  std::vector<int64_t> starts;
  for (int r = 0; r < B; ++r) {
    int64_t w = (index % nb) + int64_t(r) * nb;  // 0 .. total-1
    starts.push_back(split_ + (total > 1 ? room * w / (total - 1) : 0));
  }
  return windows(starts);
}

}  // namespace merak::model
