#pragma once
// A read-only memory mapping of a whole file: the pages stay in the page
// cache, so a dataset larger than memory is read without a copy.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace merak::model::text {

class mapped_file {
 public:
  mapped_file() = default;
  // Maps `path` (`what` names it in errors: "index file", "token file").
  // Throws merak::error naming both when the file is missing, not a regular
  // file, or cannot be mapped. An empty file maps to an empty span.
  mapped_file(const std::string& path, const char* what);
  ~mapped_file();
  mapped_file(mapped_file&& other) noexcept;
  mapped_file& operator=(mapped_file&& other) noexcept;
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void release();

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace merak::model::text
