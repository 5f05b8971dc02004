#include "model/text/token_file.hpp"

#include <cstring>
#include <filesystem>

#include "core/error.hpp"
#include "model/text/indexed_dataset.hpp"

namespace merak::model::text {
namespace {

constexpr size_t kHeaderBytes = 256 * 4;

int32_t header_field(const mapped_file& f, int i) {
  int32_t v;
  std::memcpy(&v, f.bytes().data() + i * 4, 4);
  return v;
}

}  // namespace

token_file::token_file(const std::string& path) : file_(path, "token file") {
  if (file_.size() < kHeaderBytes)
    fail("token file '{}' is {} bytes: too short for llm.c's {}-byte header", path, file_.size(),
         kHeaderBytes);
  if (header_field(file_, 0) != kLlmcMagic)
    fail("token file '{}': magic {} at byte 0 is not llm.c's {}", path, header_field(file_, 0),
         kLlmcMagic);
  version_ = header_field(file_, 1);
  if (version_ != 1 && version_ != 2)
    fail("token file '{}': version {} at byte 4 is not supported (1: uint16, 2: uint32)", path,
         version_);
  const int32_t count = header_field(file_, 2);
  const uint64_t item = version_ == 1 ? 2 : 4;
  if (count < 0 || kHeaderBytes + uint64_t(count) * item != file_.size())
    fail("token file '{}': token count {} at byte 8 needs {} bytes but the file has {}", path,
         count, kHeaderBytes + int64_t(count) * int64_t(item), file_.size());
  tokens_ = count;
  if (tokens_ > 0) starts_.push_back(0);
  const int64_t delim = delimiter();
  for (int64_t i = 1; i < tokens_; ++i)
    if (token(i) == delim) starts_.push_back(i);
}

int64_t token_file::token(int64_t i) const {
  const uint8_t* p = file_.bytes().data() + kHeaderBytes;
  if (version_ == 1) {
    uint16_t v;
    std::memcpy(&v, p + i * 2, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, p + i * 4, 4);
  return v;
}

int64_t token_file::document_tokens(int64_t d) const {
  MERAK_CHECK(d >= 0 && d < documents(), "document {} of {}", d, documents());
  const int64_t end = d + 1 < documents() ? starts_[size_t(d) + 1] : tokens_;
  return end - starts_[size_t(d)];
}

void token_file::read(int64_t d, int64_t offset, int64_t count, int32_t* out, int64_t vocab) const {
  MERAK_CHECK(offset >= 0 && count >= 0 && offset + count <= document_tokens(d),
              "read of document {}", d);
  const int64_t first = starts_[size_t(d)] + offset;
  for (int64_t i = first; i < first + count; ++i) {
    const int64_t id = token(i);
    if (id >= vocab)
      fail("token file '{}': id {} at byte {} is outside the model's vocabulary [0, {})",
           file_.path(), id, int64_t(kHeaderBytes) + i * (version_ == 1 ? 2 : 4), vocab);
    *out++ = int32_t(id);
  }
}

std::shared_ptr<const document_source> open_documents(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::exists(index_path(path), ec)) return std::make_shared<indexed_dataset>(path);
  if (std::filesystem::is_regular_file(path, ec)) return std::make_shared<token_file>(path);
  fail(
      "data path '{}': neither '{}' (a Megatron indexed dataset, with its .bin) nor an llm.c "
      "token file exists",
      path, index_path(path));
}

}  // namespace merak::model::text
