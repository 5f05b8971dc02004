// The SVM model reader (merak's JSON and LIBLINEAR-style text) on
// arbitrary bytes: once with the checksum verified (as a user loads a
// model), once without (as --skip-checksum does), which reaches the parser.
#include "core/error.hpp"
#include "core/files.hpp"
#include "svm/linear_model.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (bool verify : {true, false}) {
    merak::set_verify_checksums(verify);
    for (const char* suffix : {".json", ".txt"}) {
      merak::fuzz::temp_file f(data, size, suffix);
      try {
        merak::svm::read_model(f.path());
      } catch (const merak::error&) {
      }
    }
  }
  merak::set_verify_checksums(true);
  return 0;
}
