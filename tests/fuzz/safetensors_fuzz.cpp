// The checkpoint reader on arbitrary bytes: the header length, the JSON
// header, shapes and offsets, the checksum, the values.
#include "core/error.hpp"
#include "model/safetensors.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  merak::fuzz::temp_file f(data, size, ".safetensors");
  try {
    merak::model::read_safetensors(f.path());
  } catch (const merak::error&) {
  }
  return 0;
}
