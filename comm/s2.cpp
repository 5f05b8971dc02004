#include "comm/s2.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <optional>

#include "comm/count_sketch.hpp"
#include "comm/row_sparse.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"

namespace merak::comm {

int64_t s2_sketch_width(const codec_config& config, int64_t n, int64_t d) {
  if (config.sketch_width > 0) return config.sketch_width;
  const double w = std::round(config.sketch_ratio * double(n) * double(d) / config.sketch_rows);
  return std::max<int64_t>(1, int64_t(w));
}

uint64_t s2_step_seed(uint64_t seed, uint64_t step) {
  return mix64(seed ^ mix64(step));
}

namespace {

// One step (spec steps 1-8):
//   encode:  G_i += E_i (feedback); B_i = non-zero rows; T_i = sketch(G_i)
//   round 0: B = OR(B_i), T = SUM(T_i)
//   decode:  on union rows U, Ĝ = median_j s_j·T[j][h_j] / P; feedback
//            updates E_i on U; rows outside U stay zero.
class s2_codec final : public codec {
 public:
  explicit s2_codec(const codec_config& config) : config_(config) {}

  const codec_config& config() const override { return config_; }

  void encode(std::span<float> grad, int64_t n, int64_t d, int ranks, codec_message& msg) override {
    check_rows_shape(grad, n, d, "s2 codec");
    if (ranks < 1) fail("s2 codec: group size {} must be positive", ranks);
    if (!err_rows_.empty() && (n != n_ || d != d_))
      fail("s2 codec: error feedback holds a gradient of n={} d={}, this step has n={} d={}", n_,
           d_, n, d);
    n_ = n, d_ = d, ranks_ = ranks;
    // 1. error feedback: the residual of the last step joins this gradient.
    for (size_t i = 0; i < err_rows_.size(); ++i) {
      float* g = grad.data() + int64_t(err_rows_[i]) * d;
      const float* e = err_.data() + int64_t(i) * d;
      for (int64_t c = 0; c < d; ++c) g[c] += e[c];
    }
    // 2. bitmap of non-zero rows; 3. the sketch of those rows only.
    if (find_rows(grad, n, d, own_rows_) && !err_rows_.empty()) {
      // The known rows say nothing of the rows the feedback added to.
      merged_.clear();
      std::set_union(own_rows_.begin(), own_rows_.end(), err_rows_.begin(), err_rows_.end(),
                     std::back_inserter(merged_));
      own_rows_.swap(merged_);
    }
    // Bitmap and table in one buffer, so that the driver reduces both in one
    // ring (allreduce_or_sum): [bitmap words][table floats].
    sketch_.emplace(config_.sketch_rows, s2_sketch_width(config_, n, d), n, d,
                    s2_step_seed(config_.seed, step_), config_.hash == sketch_hash::rows);
    const size_t words = size_t(bitmap_words(n));
    const size_t cells = size_t(sketch_->rows() * sketch_->width());
    buf_.assign((words * 2 + cells) * 4, std::byte{0});  // bytes: storage for both
    bits_ = std::span<uint64_t>(reinterpret_cast<uint64_t*>(buf_.data()), words);
    table_ = std::span<float>(reinterpret_cast<float*>(buf_.data() + words * 8), cells);
    for (uint32_t k : own_rows_) bits_[k >> 6] |= uint64_t(1) << (k & 63);
    sketch_->add_rows(grad, own_rows_, table_);
    if (config_.feedback == error_feedback::contractive)
      own_table_.assign(table_.begin(), table_.end());
    msg.clear();
    msg.bits = bits_, msg.sum = table_;
  }

  bool advance(codec_message&) override { return false; }

  void decode(codec_message& msg, std::span<float> grad) override {
    MERAK_CHECK(sketch_ && int64_t(grad.size()) == n_ * d_);
    bitmap_to_rows(bits_, union_);
    const int64_t d = d_;
    const float p = float(ranks_);
    switch (config_.feedback) {
      case error_feedback::off:
        sketch_->estimate_into(table_, union_, p, grad);
        break;
      case error_feedback::contractive: {
        // ω = nnz(U)/(r·w): the gradient is Ĝ/(1+ω) and E_i = G_i − U(T_i)/(1+ω),
        // so that the ranks' errors average to the global compression error.
        const double omega =
            double(union_.size()) * double(d) / double(sketch_->rows() * sketch_->width());
        const float scale = float(1.0 + omega);
        err_.resize(union_.size() * size_t(d));
        sketch_->estimate_packed(own_table_, union_, scale, err_);
        subtract_from_rows(grad);
        sketch_->estimate_into(table_, union_, p * scale, grad);
        break;
      }
      case error_feedback::plain:
        // E_i = G_i − Ĝ: diverges once the sketch is narrower than the union.
        err_.resize(union_.size() * size_t(d));
        sketch_->estimate_packed(table_, union_, p, err_);
        subtract_from_rows(grad);
        sketch_->estimate_into(table_, union_, p, grad);
        break;
    }
    if (config_.feedback != error_feedback::off) err_rows_ = union_;
    ++step_;
    msg.clear();
  }

  int64_t own_rows() const override { return int64_t(own_rows_.size()); }
  int64_t union_rows() const override { return int64_t(union_.size()); }
  uint64_t step() const override { return step_; }

 private:
  // err_ (packed estimate on union rows) := G_i − err_.
  void subtract_from_rows(std::span<const float> grad) {
    for (size_t i = 0; i < union_.size(); ++i) {
      const float* g = grad.data() + int64_t(union_[i]) * d_;
      float* e = err_.data() + int64_t(i) * d_;
      for (int64_t c = 0; c < d_; ++c) e[c] = g[c] - e[c];
    }
  }

  codec_config config_;
  int64_t n_ = 0, d_ = 0;
  int ranks_ = 1;
  uint64_t step_ = 0;
  std::optional<count_sketch> sketch_;
  std::vector<uint32_t> own_rows_, union_, merged_;
  std::vector<std::byte> buf_;  // storage: bitmap words, then the table (floats)
  std::span<uint64_t> bits_;
  std::span<float> table_;
  std::vector<float> own_table_;
  // Error feedback E_i, non-zero only on err_rows_ (the last union), packed.
  std::vector<uint32_t> err_rows_;
  std::vector<float> err_;
};

}  // namespace

std::unique_ptr<codec> make_s2_codec(const codec_config& config) {
  return std::make_unique<s2_codec>(config);
}

}  // namespace merak::comm
