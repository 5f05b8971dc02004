// The tokenizer.json reader on arbitrary bytes: JSON, the model's vocabulary
// and merges, pre-tokenizer regexes, added tokens; an accepted file then
// encodes and decodes a fixed text.
#include "core/error.hpp"
#include "model/text/tokenizer.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  merak::fuzz::temp_file f(data, size, ".tokenizer.json");
  try {
    auto t = merak::model::text::make_tokenizer({"HuggingFaceTokenizer", "", "", f.path()});
    const auto ids = t->encode("Hello, wörld! it's 12345 <|end_of_text|>   \n\n 日本 😀");
    t->decode(ids);
  } catch (const merak::error&) {
  }
  return 0;
}
