// The Megatron indexed dataset reader (.idx + .bin), the llm.c token file
// reader and the GPT sample index on arbitrary bytes. Input: one byte n,
// then n bytes of PREFIX.bin, then PREFIX.idx (the rest); the whole input is
// also read as an llm.c token file.
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "model/text/gpt_dataset.hpp"
#include "model/text/indexed_dataset.hpp"
#include "model/text/token_file.hpp"
#include "tests/fuzz/fuzz_input.hpp"

namespace {

// Reads every document, then the first samples of a shuffled index.
void read_all(std::shared_ptr<const merak::model::text::document_source> docs) {
  constexpr int64_t kAnyId = int64_t(std::numeric_limits<int32_t>::max()) + 1;
  std::vector<int32_t> buf;
  for (int64_t d = 0; d < docs->documents(); ++d) {
    buf.resize(size_t(docs->document_tokens(d)));
    docs->read(d, 0, int64_t(buf.size()), buf.data(), kAnyId);
  }
  merak::model::text::gpt_samples s(docs, 0, docs->documents(), 4, true, "fuzz");
  int32_t out[5];
  for (int64_t g = 0; g < 8; ++g) s.sample(1, g, out, kAnyId);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t bin = std::min<size_t>(data[0], size - 1);
  merak::fuzz::temp_file b(data + 1, bin, ".bin");
  merak::fuzz::temp_file i(data + 1 + bin, size - 1 - bin, ".idx");
  const std::string prefix = b.path().substr(0, b.path().size() - 4);
  try {
    read_all(std::make_shared<merak::model::text::indexed_dataset>(prefix));
  } catch (const merak::error&) {
  }
  merak::fuzz::temp_file whole(data, size, ".llmc");
  try {
    read_all(std::make_shared<merak::model::text::token_file>(whole.path()));
  } catch (const merak::error&) {
  }
  return 0;
}
