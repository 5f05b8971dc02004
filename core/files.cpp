#include "core/files.hpp"

#include <filesystem>

#include "core/error.hpp"

namespace merak {

void check_input_file(const std::string& path, const char* what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (ec || st.type() == fs::file_type::not_found) return;
  if (st.type() == fs::file_type::directory) fail("{} '{}' is a directory", what, path);
  if (st.type() != fs::file_type::regular && st.type() != fs::file_type::fifo)
    fail("{} '{}' is not a regular file or a pipe", what, path);
}

}  // namespace merak
