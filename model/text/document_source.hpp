#pragma once
// A tokenized corpus seen as documents of token ids: what the GPT sample
// index (gpt_dataset.hpp) draws its samples from. Implemented by Megatron's
// indexed dataset (indexed_dataset.hpp) and llm.c's token files
// (token_file.hpp), both memory-mapped: reading copies only the tokens asked
// for.

#include <cstdint>
#include <memory>
#include <string>

namespace merak::model::text {

class document_source {
 public:
  virtual ~document_source() = default;
  virtual int64_t documents() const = 0;
  // Tokens of document `d`, 0 <= d < documents().
  virtual int64_t document_tokens(int64_t d) const = 0;
  // Copies tokens [offset, offset + count) of document `d` to `out`. Each id
  // must be in [0, vocab): one outside fails (merak::error) naming the file,
  // the byte offset, the id and the vocabulary. The range must lie inside
  // the document (checked).
  virtual void read(int64_t d, int64_t offset, int64_t count, int32_t* out,
                    int64_t vocab) const = 0;
  // What errors name: the dataset prefix or the file.
  virtual const std::string& name() const = 0;
};

// Opens `path` as a Megatron indexed dataset (PATH.idx + PATH.bin) when
// PATH.idx exists, else as an llm.c token file (PATH itself). Throws
// merak::error naming the file and field of the first damage found.
std::shared_ptr<const document_source> open_documents(const std::string& path);

}  // namespace merak::model::text
