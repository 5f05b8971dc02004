// The SVM data readers (LIBSVM text and CSV) on arbitrary text.
#include <string_view>

#include "core/error.hpp"
#include "svm/data_reader.hpp"

namespace {

// An index of 8 digits or more before a ':' asks for tens of millions of
// features: a legitimate but slow input (every fit holds dense vectors of
// the feature count), which would take the fuzzer's time. The readers'
// bound on huge indices has unit tests (tests/svm/data_reader_test.cpp).
bool asks_for_huge_features(std::string_view text) {
  int digits = 0;
  for (char c : text) {
    if (c >= '0' && c <= '9') {
      if (++digits >= 8) return true;
    } else {
      digits = 0;
    }
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (asks_for_huge_features(text)) return 0;
  for (int format = 0; format < 2; ++format) {
    try {
      if (format == 0)
        merak::svm::parse_libsvm(text, "fuzz.libsvm");
      else
        merak::svm::parse_csv(text, "fuzz.csv");
    } catch (const merak::error&) {
    }
  }
  return 0;
}
