#pragma once
// llm.c's token files (dev/data/data_common.py write_datafile): a header of
// 256 little-endian int32 (magic 20240520, version, token count) then the
// tokens: version 1 uint16 (GPT-2), version 2 uint32 (Llama 3). llm.c
// starts every document with a delimiter token (version 1: <|endoftext|>
// 50256; version 2: <|begin_of_text|> 128000): documents begin there.

#include <cstdint>
#include <string>
#include <vector>

#include "model/text/document_source.hpp"
#include "model/text/mapped_file.hpp"

namespace merak::model::text {

inline constexpr int32_t kLlmcMagic = 20240520;

class token_file final : public document_source {
 public:
  // Maps `path` and finds its documents (one pass over the tokens). Throws
  // merak::error naming the file and field for a short file, a bad magic, an
  // unknown version, or a token count that disagrees with the file size.
  explicit token_file(const std::string& path);

  int version() const { return version_; }
  int64_t tokens() const { return tokens_; }
  // The id a document starts with in this version.
  int64_t delimiter() const { return version_ == 1 ? 50256 : 128000; }

  int64_t documents() const override { return int64_t(starts_.size()); }
  int64_t document_tokens(int64_t d) const override;
  void read(int64_t d, int64_t offset, int64_t count, int32_t* out, int64_t vocab) const override;
  const std::string& name() const override { return file_.path(); }

 private:
  int64_t token(int64_t i) const;

  mapped_file file_;
  int version_ = 1;
  int64_t tokens_ = 0;
  std::vector<int64_t> starts_;  // first token of each document
};

}  // namespace merak::model::text
