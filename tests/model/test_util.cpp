#include "tests/model/test_util.hpp"

#include <string>

namespace merak::test {

std::vector<uint8_t> small_text(size_t bytes) {
  static const std::string verses =
      "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money "
      "in my purse, and nothing particular to interest me on shore, I thought I would sail about "
      "a little and see the watery part of the world. ";
  std::vector<uint8_t> out;
  while (out.size() < bytes) out.insert(out.end(), verses.begin(), verses.end());
  out.resize(bytes);
  return out;
}

}  // namespace merak::test
