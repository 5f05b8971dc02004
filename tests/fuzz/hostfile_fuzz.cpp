// The hostfile reader of merak launch on arbitrary text.
#include "job/launcher.hpp"
#include "core/error.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  merak::fuzz::temp_file f(data, size, ".hosts");
  try {
    merak::job::read_hostfile(f.path());
  } catch (const merak::error&) {
  }
  return 0;
}
