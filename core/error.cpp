#include "core/error.hpp"

#include <algorithm>

namespace merak {

namespace {

// The largest n <= most such that text[0, n) does not end inside a UTF-8
// character.
size_t utf8_boundary(std::string_view text, size_t most) {
  if (most >= text.size()) return text.size();
  size_t n = most;
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return n;
}

}  // namespace

std::string quoted_cut(std::string_view value, size_t most) {
  if (value.size() <= most) return std::string(value);
  return fmt::format("{}... ({} bytes)", value.substr(0, utf8_boundary(value, most)),
                     value.size());
}

std::string error_line(std::string_view text, size_t most) {
  std::string clean;
  clean.reserve(std::min(text.size(), 2 * most + 64));
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7F)
      clean += fmt::format("\\x{:02x}", c);
    else
      clean += ch;
  }
  if (clean.size() <= most) return clean;
  const size_t tail = most / 4;
  const size_t head = utf8_boundary(clean, most - tail);
  size_t from = clean.size() - tail;
  while (from < clean.size() && (static_cast<unsigned char>(clean[from]) & 0xC0) == 0x80) ++from;
  return fmt::format("{}...[{} bytes cut]...{}", std::string_view(clean).substr(0, head),
                     from - head, std::string_view(clean).substr(from));
}

void check_failed(const char* expr, const char* file, int line, const std::string& detail) {
  throw error(fmt::format("internal check failed: {} ({}:{}){}{}", expr, file, line,
                          detail.empty() ? "" : ": ", detail));
}

}  // namespace merak
