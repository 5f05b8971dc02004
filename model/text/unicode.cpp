#include "model/text/unicode.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace merak::model::text {

std::optional<size_t> first_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    char32_t cp, min;
    if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return i;
    }
    if (n - i < len) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::nullopt;
}

void check_utf8(std::string_view text, const std::string& what) {
  if (auto at = first_invalid_utf8(text))
    fail("{}: invalid UTF-8 at byte offset {} (byte 0x{:02X})", what, *at,
         static_cast<unsigned char>(text[*at]));
}

namespace {

bool printable_byte(unsigned b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct byte_level_tables {
  std::array<char32_t, 256> to_code_point{};
  std::array<int16_t, 324> from_code_point{};  // every mapped code point is below U+0144
  byte_level_tables() {
    from_code_point.fill(-1);
    unsigned next = 0;
    for (unsigned b = 0; b < 256; ++b) {
      to_code_point[b] = printable_byte(b) ? char32_t(b) : char32_t(256 + next++);
      from_code_point[to_code_point[b]] = int16_t(b);
    }
  }
};

const byte_level_tables& tables() {
  static const byte_level_tables t;
  return t;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

}  // namespace

char32_t byte_to_code_point(uint8_t b) {
  return tables().to_code_point[b];
}

std::optional<std::string> byte_level_decode(std::string_view encoded, char32_t* bad) {
  const auto& t = tables();
  std::string out;
  out.reserve(encoded.size());
  const auto* s = reinterpret_cast<const unsigned char*>(encoded.data());
  for (size_t i = 0; i < encoded.size();) {
    // Any well-formed sequence decodes (to name the code point when it is
    // outside the alphabet); a malformed one reports U+FFFD.
    char32_t cp = 0xFFFD;
    size_t len = s[i] < 0x80             ? 1
                 : (s[i] & 0xE0) == 0xC0 ? 2
                 : (s[i] & 0xF0) == 0xE0 ? 3
                 : (s[i] & 0xF8) == 0xF0 ? 4
                                         : 0;
    if (len == 0 || i + len > encoded.size()) {
      if (bad) *bad = cp;
      return std::nullopt;
    }
    cp = len == 1 ? s[i] : char32_t(s[i] & (0x7F >> len));
    for (size_t k = 1; k < len; ++k) cp = cp << 6 | (s[i + k] & 0x3F);
    static constexpr char32_t kshortest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kshortest[len]) cp = 0xFFFD;  // an overlong spelling is not the character
    i += len;
    if (cp >= t.from_code_point.size() || t.from_code_point[cp] < 0) {
      if (bad) *bad = cp;
      return std::nullopt;
    }
    out += char(t.from_code_point[cp]);
  }
  return out;
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(out, byte_to_code_point(b));
  return out;
}

}  // namespace merak::model::text
