#include "model/data.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>

#include "core/error.hpp"
#include "core/files.hpp"
#include "core/process_stats.hpp"
#include "core/rng.hpp"

namespace merak::model {
namespace {
constexpr uint64_t kTrainStream = 0x7472'6169'6e00ull;  // "train"

bool word_byte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '\'';
}
bool space_byte(unsigned char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\v' || c == '\f';
}
}  // namespace

std::string_view tokenizer_name(tokenizer t) {
  return t == tokenizer::words ? "words" : "bytes";
}

tokenizer parse_tokenizer(std::string_view text) {
  if (text == "bytes") return tokenizer::bytes;
  if (text == "words") return tokenizer::words;
  fail("unknown --tokenizer '{}' (expected bytes or words)", text);
}

std::vector<int32_t> tokenize_hashed_words(std::string_view text, int vocab) {
  if (vocab < 2) fail("the words tokenizer needs --vocab of at least 2 (got {})", vocab);
  constexpr uint64_t kOffset = 0xcbf29ce484222325ull, kPrime = 0x100000001b3ull;  // FNV-1a 64
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 4);
  const uint64_t V = uint64_t(vocab);
  size_t i = 0;
  while (i < text.size()) {
    auto c = static_cast<unsigned char>(text[i]);
    if (space_byte(c)) {
      ++i;
      continue;
    }
    uint64_t h = kOffset;
    if (word_byte(c)) {
      for (; i < text.size() && word_byte(static_cast<unsigned char>(text[i])); ++i) {
        auto w = static_cast<unsigned char>(text[i]);
        if (w >= 'A' && w <= 'Z') w = static_cast<unsigned char>(w - 'A' + 'a');
        h = (h ^ w) * kPrime;
      }
    } else {
      h = (h ^ c) * kPrime;
      ++i;
    }
    ids.push_back(int32_t(h % V));
  }
  return ids;
}

std::vector<uint8_t> read_text_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open data file '{}': {}", path, std::strerror(errno));
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } close_at_end{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail("cannot read data file '{}': {}", path, std::strerror(errno));
  // A size known in advance (a regular file; /proc's report 0).
  const bool regular = S_ISREG(st.st_mode) && st.st_size > 0;
  // The text is held with its tokens (an int32 per byte at most).
  constexpr int64_t kheld_per_byte = 1 + int64_t(sizeof(int32_t));
  const int64_t memory = available_memory_bytes();
  const int64_t by_memory = memory < 0 ? INT64_MAX : memory / kheld_per_byte;
  constexpr double kgib = 1 << 30;
  if (regular && int64_t(st.st_size) > by_memory)
    fail(
        "data file '{}' holds {:.1f} GiB of text; with its tokens that needs {:.1f} GiB of "
        "memory, more than the {:.1f} GiB this process may use (free memory, ulimit -v): give a "
        "tokenized dataset with --data-path (merak data prepare), which is read from disk",
        path, double(st.st_size) / kgib, double(st.st_size) * kheld_per_byte / kgib,
        double(memory) / kgib);
  const int64_t most = regular ? int64_t(st.st_size) : std::min(kmost_piped_text, by_memory);
  std::vector<uint8_t> bytes;
  if (regular) bytes.reserve(size_t(st.st_size));
  std::vector<uint8_t> chunk(1 << 20);
  for (;;) {
    const ssize_t n = ::read(fd, chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("error reading data file '{}': {}", path, std::strerror(errno));
    if (n == 0) break;
    if (int64_t(bytes.size()) + n > most) {
      if (regular) {  // grew while read: the size it had when opened
        bytes.insert(bytes.end(), chunk.data(), chunk.data() + (most - int64_t(bytes.size())));
        break;
      }
      fail(
          "data file '{}' is not a regular file and gave more than {} bytes: text of unknown "
          "size (a pipe) is held in memory whole, at most 1 GiB{}; save it to a file",
          path, most,
          most < kmost_piped_text ? " (here less: the memory this process may use)" : "");
    }
    bytes.insert(bytes.end(), chunk.data(), chunk.data() + n);
  }
  return bytes;
}

text_corpus::text_corpus(const std::string& path, int seq, double val_fraction, tokenizer tok,
                         int vocab)
    : seq_(seq), tok_(tok), vocab_(vocab), name_(path) {
  check_input_file(path, "data file");
  init(read_text_file(path), val_fraction);
}

text_corpus::text_corpus(std::vector<uint8_t> bytes, int seq, double val_fraction, std::string name,
                         tokenizer tok, int vocab)
    : seq_(seq), tok_(tok), vocab_(vocab), name_(std::move(name)) {
  init(std::move(bytes), val_fraction);
}

void text_corpus::init(std::vector<uint8_t> bytes, double val_fraction) {
  if (bytes.empty()) fail("data file '{}' is empty", name_);
  if (seq_ < 1) fail("--seq must be at least 1 (got {})", seq_);
  if (!(val_fraction > 0 && val_fraction < 1))
    fail("validation fraction must be in (0, 1) (got {})", val_fraction);
  const bool words = tok_ == tokenizer::words;
  if (words) {
    tokens_ = tokenize_hashed_words(
        std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), vocab_);
  } else {
    vocab_ = 256;
    tokens_.assign(bytes.begin(), bytes.end());
  }
  split_ = int64_t(double(tokens_.size()) * (1.0 - val_fraction));
  const char* unit = words ? "word tokens" : "bytes";
  if (split_ < seq_ + 1 || int64_t(tokens_.size()) - split_ < seq_ + 1)
    fail(
        "data file '{}' has {} {}: too short for --seq {} (each of the training and validation "
        "parts needs at least {} {})",
        name_, tokens_.size(), unit, seq_, seq_ + 1, unit);
}

batch text_corpus::windows(const std::vector<int64_t>& starts) const {
  int B = int(starts.size()), T = seq_;
  batch b{tensor({B, T}, dtype::i32), tensor({B, T}, dtype::i32)};
  int32_t* x = b.tokens.data<int32_t>();
  int32_t* y = b.targets.data<int32_t>();
  for (int r = 0; r < B; ++r)
    for (int t = 0; t < T; ++t) {
      x[r * T + t] = tokens_[starts[r] + t];
      y[r * T + t] = tokens_[starts[r] + t + 1];
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

void text_corpus::check_vocab(int64_t model_vocab) const {
  if (tok_ == tokenizer::words && vocab_ > model_vocab)
    fail("corpus '{}' has word ids below {} but the model's --vocab is {}", name_, vocab_,
         model_vocab);
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
