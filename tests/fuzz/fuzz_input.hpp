#pragma once
// Helpers of the fuzz targets (tests/fuzz): each target defines
// LLVMFuzzerTestOneInput; bad input must end in merak::error (or be
// accepted), never in a crash, a hang or a sanitizer report.

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace merak::fuzz {

// A file holding `data`, for readers that take a path; removed on
// destruction.
class temp_file {
 public:
  temp_file(const uint8_t* data, size_t size, const char* suffix) {
    path_ = "/tmp/merak-fuzz-" + std::to_string(::getpid()) + suffix;
    if (FILE* f = std::fopen(path_.c_str(), "wb")) {
      if (size) std::fwrite(data, 1, size, f);
      std::fclose(f);
    }
  }
  ~temp_file() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace merak::fuzz
