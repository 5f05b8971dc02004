// The encoder.json + vocab.bpe reader on arbitrary bytes: the input up to
// its first NUL byte is encoder.json, the rest vocab.bpe; an accepted pair
// then encodes and decodes a fixed text.
#include <cstring>

#include "core/error.hpp"
#include "model/text/tokenizer.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t vocab_size = nul ? size_t(nul - data) : size;
  const size_t merges_at = nul ? vocab_size + 1 : size;
  merak::fuzz::temp_file vocab(data, vocab_size, ".encoder.json");
  merak::fuzz::temp_file merges(data + merges_at, size - merges_at, ".vocab.bpe");
  try {
    auto t =
        merak::model::text::make_tokenizer({"GPT2BPETokenizer", vocab.path(), merges.path(), ""});
    const auto ids = t->encode("Hello, wörld! it's 12345 <|endoftext|>   \n\n 日本 😀");
    t->decode(ids);
  } catch (const merak::error&) {
  }
  return 0;
}
