#include "model/text/tokenizer.hpp"

#include "core/error.hpp"

namespace merak::model::text {
namespace {

class byte_tokenizer final : public tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string out(ids.size(), '\0');
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] > 255)
        throw error("ByteTokenizer: id " + std::to_string(ids[i]) + " at position " +
                    std::to_string(i) + " is outside the vocabulary [0, 256)");
      out[i] = static_cast<char>(ids[i]);
    }
    return out;
  }
  int64_t vocab_size() const override { return 256; }
  std::optional<int32_t> eod() const override { return std::nullopt; }
  std::string_view type_name() const override { return "ByteTokenizer"; }
};

}  // namespace

std::unique_ptr<tokenizer> make_byte_tokenizer() {
  return std::make_unique<byte_tokenizer>();
}

std::unique_ptr<tokenizer> make_tokenizer(const tokenizer_options& options) {
  auto require = [&](const std::string& value, const char* flag) {
    if (value.empty()) fail("--tokenizer-type {} needs {}", options.type, flag);
  };
  if (options.type == "ByteTokenizer") return make_byte_tokenizer();
  if (options.type == "GPT2BPETokenizer") {
    require(options.vocab_file, "--vocab-file (encoder.json)");
    require(options.merge_file, "--merge-file (vocab.bpe)");
    return make_gpt2_bpe_tokenizer(options.vocab_file, options.merge_file);
  }
  if (options.type == "HuggingFaceTokenizer") {
    require(options.tokenizer_model, "--tokenizer-model (tokenizer.json)");
    return make_huggingface_tokenizer(options.tokenizer_model);
  }
  if (options.type == "SentencePieceTokenizer") {
    require(options.tokenizer_model, "--tokenizer-model (a SentencePiece .model)");
    return make_sentencepiece_tokenizer(options.tokenizer_model);
  }
  throw error("--tokenizer-type: unknown tokenizer '" + options.type +
              "' (known: ByteTokenizer, GPT2BPETokenizer, HuggingFaceTokenizer, "
              "SentencePieceTokenizer)");
}

}  // namespace merak::model::text
