#pragma once
// safetensors files (the format PyTorch and Hugging Face load):
//   8 bytes little-endian N | N bytes JSON header | raw tensor data
// The header maps each tensor name to {"dtype", "shape", "data_offsets"}
// (offsets relative to the data section) and may hold "__metadata__", a map
// of strings. merak adds "merak.crc32c" to the metadata: the CRC-32C of the
// whole file (length, header with these digits zeroed, data), so truncation,
// corruption and header edits are detected on load. See
// docs/checkpoint-format.md.

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/files.hpp"  // write_file_atomic, fsync_directory
#include "model/tensor.hpp"

namespace merak::model {

struct safetensors_file {
  std::map<std::string, tensor> tensors;
  std::map<std::string, std::string> metadata;  // without merak.crc32c
};

// Writes the named tensors atomically: a temporary file beside `path` is
// written, fsync'd and renamed over `path`. Tensors on a device are copied
// to the host first. Throws merak::error naming the path on any I/O failure
// (the temporary file is removed).
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, const tensor*>>& tensors,
                       const std::map<std::string, std::string>& metadata);

// How read_safetensors treats files of other writers.
struct safetensors_read_options {
  // true: a file without merak's checksum is refused (merak's own
  // checkpoints). false: one is checked where present (files of PyTorch and
  // Hugging Face carry none).
  bool require_checksum = true;
  // true: BF16 and F16 tensors are widened to F32 on load (F16 is read only
  // then); I32 stays as it is.
  bool widen_to_f32 = false;
  // Tensors for which this returns true are left out unread (buffers of
  // other writers that are no parameters, whatever their dtype); the
  // checksum still covers them.
  std::function<bool(const std::string&)> skip = {};
};

// Reads and validates a file. Throws merak::error naming the file and what is
// wrong: missing, truncated, bad header JSON, a field of the wrong type, an
// unknown dtype, offsets outside the data or inconsistent with the shape, a
// missing (see options) or mismatched checksum (unless verify_checksums() is
// off: core/files.hpp), or a value that is not finite.
safetensors_file read_safetensors(const std::string& path,
                                  const safetensors_read_options& options = {});

}  // namespace merak::model
