// A sharded checkpoint's index.json (model/sharded_checkpoint.hpp), read by
// checkpoint_reader from a directory holding only it: damage ends in
// merak::error naming the file, never a crash. An odd first byte turns the
// checksum check off (merak --skip-checksum), so the fields behind it are
// reached too; the rest is the file.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "core/error.hpp"
#include "core/files.hpp"
#include "model/sharded_checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  namespace fs = std::filesystem;
  static const fs::path dir = fs::temp_directory_path() /
                              ("merak-fuzz-index-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  if (FILE* f = std::fopen((dir / "index.json").c_str(), "wb")) {
    std::fwrite(data + 1, 1, size - 1, f);
    std::fclose(f);
  }
  merak::set_verify_checksums(data[0] % 2 == 0);
  try {
    merak::model::checkpoint_reader ckpt(dir.string());
    for (const auto& name : ckpt.parameters()) {
      try {
        ckpt.full(name);
      } catch (const merak::error&) {
      }
    }
  } catch (const merak::error&) {
  }
  return 0;
}
