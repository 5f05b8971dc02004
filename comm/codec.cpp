// The exact codecs (dense, coo, union), the factory and the pure reduction.
#include "comm/codec.hpp"

#include <cstring>

#include <cmath>
#include "comm/row_sparse.hpp"
#include "comm/s2.hpp"

#include "core/error.hpp"

namespace merak::comm {

std::string_view codec_kind_name(codec_kind k) {
  switch (k) {
    case codec_kind::dense:
      return "dense";
    case codec_kind::coo:
      return "coo";
    case codec_kind::union_rows:
      return "union";
    case codec_kind::s2:
      return "s2";
  }
  return "?";
}

double relative_l2_error(std::span<const float> estimate, std::span<const float> exact) {
  MERAK_CHECK(estimate.size() == exact.size(), "{} estimated values for {} exact ones",
              estimate.size(), exact.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < estimate.size(); ++i) {
    const double e = double(estimate[i]) - double(exact[i]);
    num += e * e;
    den += double(exact[i]) * double(exact[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

codec_kind parse_codec_kind(std::string_view text) {
  for (codec_kind k : {codec_kind::dense, codec_kind::coo, codec_kind::union_rows, codec_kind::s2})
    if (text == codec_kind_name(k)) return k;
  fail("unknown gradient codec '{}' (expected dense, coo, union or s2)", text);
}

std::string_view error_feedback_name(error_feedback f) {
  switch (f) {
    case error_feedback::off:
      return "off";
    case error_feedback::contractive:
      return "contractive";
    case error_feedback::plain:
      return "plain";
  }
  return "?";
}

error_feedback parse_error_feedback(std::string_view text) {
  if (text == "off") return error_feedback::off;
  if (text == "contractive" || text == "on") return error_feedback::contractive;
  if (text == "plain") return error_feedback::plain;
  fail("unknown error feedback '{}' (expected off, contractive (on) or plain)", text);
}

std::string_view sketch_hash_name(sketch_hash h) {
  return h == sketch_hash::rows ? "rows" : "elements";
}

sketch_hash parse_sketch_hash(std::string_view text) {
  if (text == "rows") return sketch_hash::rows;
  if (text == "elements") return sketch_hash::elements;
  fail("unknown sketch hash '{}' (expected rows or elements)", text);
}

bool codec::find_rows(std::span<const float> grad, int64_t n, int64_t d,
                      std::vector<uint32_t>& rows) {
  if (!has_known_) {
    nonzero_rows(grad, n, d, rows);
    return false;
  }
  has_known_ = false;
  for (size_t i = 0; i < known_.size(); ++i)
    if (known_[i] >= n || (i > 0 && known_[i] <= known_[i - 1]))
      fail("{} codec: known row {} at position {} is {} (rows must increase and be below n={})",
           codec_kind_name(config().kind), known_[i], i,
           known_[i] >= n ? "out of range" : "not increasing", n);
  rows.swap(known_);
  known_.clear();
  return true;
}

namespace {

// dense: one SUM of the whole gradient, in place; decode divides by P.
class dense_codec final : public codec {
 public:
  explicit dense_codec(const codec_config& config) : config_(config) {}
  const codec_config& config() const override { return config_; }

  void encode(std::span<float> grad, int64_t n, int64_t d, int ranks, codec_message& msg) override {
    check_rows_shape(grad, n, d, "dense codec");
    n_ = n, ranks_ = ranks;
    msg.clear();
    msg.sum = grad;
  }
  bool advance(codec_message&) override { return false; }
  void decode(codec_message& msg, std::span<float> grad) override {
    divide_floats(grad.data(), grad.data(), grad.size(), float(ranks_));
    ++step_;
    msg.clear();
  }
  int64_t own_rows() const override { return n_; }
  int64_t union_rows() const override { return n_; }
  uint64_t step() const override { return step_; }

 private:
  codec_config config_;
  int64_t n_ = 0;
  int ranks_ = 1;
  uint64_t step_ = 0;
};

// coo: all-gather of this rank's non-zero rows as one block
//   [m row indices, u32][m rows of d floats]     (4·m·(1 + d) bytes)
// then every rank sums the blocks in rank order.
class coo_codec final : public codec {
 public:
  explicit coo_codec(const codec_config& config) : config_(config) {}
  const codec_config& config() const override { return config_; }

  void encode(std::span<float> grad, int64_t n, int64_t d, int ranks, codec_message& msg) override {
    check_rows_shape(grad, n, d, "coo codec");
    n_ = n, d_ = d, ranks_ = ranks;
    find_rows(grad, n, d, own_);
    const size_t m = own_.size();
    block_.resize(m * 4 * size_t(1 + d));
    if (m) std::memcpy(block_.data(), own_.data(), m * 4);
    std::byte* vals = block_.data() + m * 4;
    for (size_t i = 0; i < m; ++i)
      std::memcpy(vals + i * size_t(d) * 4, grad.data() + int64_t(own_[i]) * d, size_t(d) * 4);
    msg.clear();
    msg.gather = block_;
    msg.has_gather = true;
  }
  bool advance(codec_message&) override { return false; }

  // The blocks' row lists are increasing, so the union is their merge: each
  // union row is summed over the blocks that hold it (rank order) and divided
  // by P in one visit, while it is in cache. Same operations, in the same
  // order per row, as zeroing this rank's rows, adding every block in turn
  // and dividing the union rows after: the same bits.
  void decode(codec_message& msg, std::span<float> grad) override {
    if (int(msg.gathered_sizes.size()) != ranks_)
      fail("coo codec: the all-gather returned {} blocks for {} ranks", msg.gathered_sizes.size(),
           ranks_);
    const int64_t d = d_;
    const size_t row_bytes = 4 * size_t(1 + d);
    const auto R = size_t(ranks_);
    rows_at_.resize(R), vals_at_.resize(R), count_.resize(R), next_.assign(R, 0);
    const std::byte* p = msg.gathered.data();
    for (size_t r = 0; r < R; ++r) {
      const size_t bytes = msg.gathered_sizes[r];
      if (bytes % row_bytes)
        fail("coo codec: rank {} sent {} bytes, not a whole number of rows of d={}", r, bytes, d);
      count_[r] = bytes / row_bytes;
      rows_at_[r] = p, vals_at_[r] = p + count_[r] * 4;
      p += bytes;
    }
    auto row_of = [&](size_t r, size_t i) {
      uint32_t k;
      std::memcpy(&k, rows_at_[r] + i * 4, 4);
      return k;
    };
    union_.clear();
    size_t own_at = 0;
    const float fp = float(ranks_);
    for (;;) {
      bool more = false;  // the next union row k: the least row at any cursor
      uint32_t k = 0;
      for (size_t r = 0; r < R; ++r)
        if (next_[r] < count_[r]) {
          const uint32_t kr = row_of(r, next_[r]);
          k = more ? std::min(k, kr) : kr;
          more = true;
        }
      if (!more) break;
      if (k >= n_) fail("coo codec: a rank sent row {} of a gradient with n={}", k, n_);
      float* dst = grad.data() + int64_t(k) * d;
      // This rank's own rows start from zero, the others from what they hold (±0).
      const bool own = own_at < own_.size() && own_[own_at] == k;
      if (own) ++own_at;
      bool first = own;
      for (size_t r = 0; r < R; ++r) {
        if (next_[r] >= count_[r] || row_of(r, next_[r]) != k) continue;
        const std::byte* src = vals_at_[r] + next_[r] * size_t(d) * 4;
        if (++next_[r] < count_[r] && row_of(r, next_[r]) <= k)
          fail("coo codec: rank {} sent rows out of order ({} after {})", r, row_of(r, next_[r]),
               k);
        add_bytes(dst, src, d, first);
        first = false;
      }
      divide_floats(dst, dst, size_t(d), fp);
      union_.push_back(k);
    }
    ++step_;
    msg.clear();
  }
  int64_t own_rows() const override { return int64_t(own_.size()); }
  int64_t union_rows() const override { return int64_t(union_.size()); }
  uint64_t step() const override { return step_; }

 private:
  // dst[c] := dst[c] (+0 instead when `from_zero`) + the c-th of the m floats
  // at src (4-aligned bytes of the gathered buffer, read with memcpy).
  static void add_bytes(float* __restrict dst, const std::byte* __restrict src, int64_t m,
                        bool from_zero) {
    auto at = [src](int64_t c) {
      float v;
      std::memcpy(&v, src + c * 4, 4);
      return v;
    };
    if (from_zero) {
      for (int64_t c = 0; c < m; ++c) dst[c] = 0.0f + at(c);
    } else {
      for (int64_t c = 0; c < m; ++c) dst[c] += at(c);
    }
  }

  codec_config config_;
  int64_t n_ = 0, d_ = 0;
  int ranks_ = 1;
  uint64_t step_ = 0;
  std::vector<uint32_t> own_, union_;
  std::vector<std::byte> block_;
  // Merge cursors of decode, per rank: its row list, its values, its row
  // count and the next row to take.
  std::vector<const std::byte*> rows_at_, vals_at_;
  std::vector<size_t> count_, next_;
};

// union (OmniReduce-style):
//   round 0: B = OR(B_i)                     (n/8 bytes)
//   round 1: S = SUM(G_i on the rows of B, packed in row order)   (|U|·d floats)
//   decode:  G := S scattered to its rows / P
class union_codec final : public codec {
 public:
  explicit union_codec(const codec_config& config) : config_(config) {}
  const codec_config& config() const override { return config_; }

  void encode(std::span<float> grad, int64_t n, int64_t d, int ranks, codec_message& msg) override {
    check_rows_shape(grad, n, d, "union codec");
    n_ = n, d_ = d, ranks_ = ranks;
    grad_ = grad;
    find_rows(grad, n, d, own_);
    rows_to_bitmap(own_, n, bits_);
    round_ = 0;
    msg.clear();
    msg.bits = bits_;
  }

  bool advance(codec_message& msg) override {
    msg.clear();
    if (round_++ > 0) return false;
    bitmap_to_rows(bits_, union_);
    // Rows of the union that are not this rank's are zero in grad_: copying
    // them costs what zero-filling would.
    packed_.resize(union_.size() * size_t(d_));
    for (size_t i = 0; i < union_.size(); ++i)
      std::memcpy(packed_.data() + i * size_t(d_), grad_.data() + int64_t(union_[i]) * d_,
                  size_t(d_) * 4);
    msg.sum = packed_;
    return true;
  }

  void decode(codec_message& msg, std::span<float> grad) override {
    MERAK_CHECK(round_ == 2 && grad.data() == grad_.data());
    for (size_t i = 0; i < union_.size(); ++i)
      divide_floats(grad.data() + int64_t(union_[i]) * d_, packed_.data() + i * size_t(d_),
                    size_t(d_), float(ranks_));
    grad_ = {};
    ++step_;
    msg.clear();
  }
  int64_t own_rows() const override { return int64_t(own_.size()); }
  int64_t union_rows() const override { return int64_t(union_.size()); }
  uint64_t step() const override { return step_; }

 private:
  codec_config config_;
  int64_t n_ = 0, d_ = 0;
  int ranks_ = 1;
  int round_ = 0;
  uint64_t step_ = 0;
  std::span<float> grad_;
  std::vector<uint32_t> own_, union_;
  std::vector<uint64_t> bits_;
  std::vector<float> packed_;
};

}  // namespace

std::unique_ptr<codec> make_codec(const codec_config& config) {
  if (config.kind == codec_kind::s2) {
    if (config.sketch_rows < 1 || config.sketch_rows > 32)
      fail("s2 codec: sketch rows r={} must be in 1..32", config.sketch_rows);
    if (config.sketch_width < 0)
      fail("s2 codec: sketch width w={} is negative", config.sketch_width);
    if (config.sketch_width == 0 && !(config.sketch_ratio > 0 && config.sketch_ratio <= 64))
      fail("s2 codec: sketch ratio {} must be in (0, 64]", config.sketch_ratio);
  }
  switch (config.kind) {
    case codec_kind::dense:
      return std::make_unique<dense_codec>(config);
    case codec_kind::coo:
      return std::make_unique<coo_codec>(config);
    case codec_kind::union_rows:
      return std::make_unique<union_codec>(config);
    case codec_kind::s2:
      return make_s2_codec(config);
  }
  fail("make_codec: unknown codec kind {}", int(config.kind));
}

void reduce_messages(std::span<codec_message* const> msgs) {
  if (msgs.empty()) return;
  codec_message& m0 = *msgs[0];
  for (size_t r = 1; r < msgs.size(); ++r) {
    const codec_message& m = *msgs[r];
    if (m.bits.size() != m0.bits.size() || m.sum.size() != m0.sum.size() ||
        m.has_gather != m0.has_gather)
      fail("reduce_messages: rank {} sends {} bitmap words, {} floats{}; rank 0 sends {}, {}{}", r,
           m.bits.size(), m.sum.size(), m.has_gather ? " and a block" : "", m0.bits.size(),
           m0.sum.size(), m0.has_gather ? " and a block" : "");
  }
  for (size_t r = 1; r < msgs.size(); ++r) {
    for (size_t i = 0; i < m0.bits.size(); ++i) m0.bits[i] |= msgs[r]->bits[i];
    for (size_t i = 0; i < m0.sum.size(); ++i) m0.sum[i] += msgs[r]->sum[i];
  }
  std::vector<std::byte> all;
  std::vector<size_t> sizes;
  if (m0.has_gather)
    for (codec_message* m : msgs) {
      all.insert(all.end(), m->gather.begin(), m->gather.end());
      sizes.push_back(m->gather.size());
    }
  for (size_t r = 1; r < msgs.size(); ++r) {
    codec_message& m = *msgs[r];
    std::copy(m0.bits.begin(), m0.bits.end(), m.bits.begin());
    std::copy(m0.sum.begin(), m0.sum.end(), m.sum.begin());
    m.gathered = all, m.gathered_sizes = sizes;
  }
  m0.gathered = std::move(all), m0.gathered_sizes = std::move(sizes);
}

void run_codecs(std::span<codec* const> codecs, std::span<const std::span<float>> grads, int64_t n,
                int64_t d) {
  const size_t p = codecs.size();
  if (grads.size() != p) fail("run_codecs: {} codecs but {} gradients", p, grads.size());
  std::vector<codec_message> msgs(p);
  std::vector<codec_message*> ptrs;
  for (auto& m : msgs) ptrs.push_back(&m);
  for (size_t r = 0; r < p; ++r) codecs[r]->encode(grads[r], n, d, int(p), msgs[r]);
  for (;;) {
    reduce_messages(ptrs);
    bool more = false;
    for (size_t r = 0; r < p; ++r) more = codecs[r]->advance(msgs[r]);
    if (!more) break;
  }
  for (size_t r = 0; r < p; ++r) codecs[r]->decode(msgs[r], grads[r]);
}

}  // namespace merak::comm
