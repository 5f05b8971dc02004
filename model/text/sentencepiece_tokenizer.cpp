// SentencePieceTokenizer: a SentencePiece .model file through the
// sentencepiece library (Debian's libsentencepiece), which encodes and
// decodes exactly as spm_encode / spm_decode do.
#include <sentencepiece_processor.h>

#include "core/error.hpp"
#include "model/text/bpe_files.hpp"
#include "model/text/tokenizer.hpp"

namespace merak::model::text {

namespace {

class sentencepiece_tokenizer final : public tokenizer {
 public:
  explicit sentencepiece_tokenizer(const std::string& path) {
    // The library reads the file itself; reading it here first gives the
    // same one-line refusals as the other readers for missing, special or
    // oversized files, and hands the library bytes rather than a path.
    const std::string bytes = read_tokenizer_file(path, "--tokenizer-model");
    const auto status = processor_.LoadFromSerializedProto(bytes);
    if (!status.ok())
      fail("--tokenizer-model {}: not a SentencePiece model: {}", path, status.ToString());
    vocab_size_ = processor_.GetPieceSize();
    if (vocab_size_ <= 0) fail("--tokenizer-model {}: a SentencePiece model without pieces", path);
    if (processor_.eos_id() >= 0) eod_ = processor_.eos_id();
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int> ids;
    const auto status = processor_.Encode(text, &ids);
    if (!status.ok()) fail("SentencePieceTokenizer: {}", status.ToString());
    return {ids.begin(), ids.end()};
  }

  std::string decode(std::span<const int32_t> ids) const override {
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] < 0 || ids[i] >= vocab_size_)
        fail("SentencePieceTokenizer: id {} at position {} is outside the vocabulary [0, {})",
             ids[i], i, vocab_size_);
    std::string text;
    const auto status = processor_.Decode(std::vector<int>(ids.begin(), ids.end()), &text);
    if (!status.ok()) fail("SentencePieceTokenizer: {}", status.ToString());
    return text;
  }

  int64_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> eod() const override { return eod_; }
  std::string_view type_name() const override { return "SentencePieceTokenizer"; }

 private:
  sentencepiece::SentencePieceProcessor processor_;
  int64_t vocab_size_ = 0;
  std::optional<int32_t> eod_;
};

}  // namespace

std::unique_ptr<tokenizer> make_sentencepiece_tokenizer(const std::string& path) {
  return std::make_unique<sentencepiece_tokenizer>(path);
}

}  // namespace merak::model::text
