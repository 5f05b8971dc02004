// The SVM model reader (merak's JSON and LIBLINEAR-style text) on
// arbitrary bytes.
#include "core/error.hpp"
#include "svm/linear_model.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (const char* suffix : {".json", ".txt"}) {
    merak::fuzz::temp_file f(data, size, suffix);
    try {
      merak::svm::read_model(f.path());
    } catch (const merak::error&) {
    }
  }
  return 0;
}
