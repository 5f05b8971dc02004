#pragma once
// UTF-8 validation and GPT-2's byte-level alphabet (`bytes_to_unicode` of
// openai/gpt-2's encoder.py): the 256 byte values mapped one-to-one onto
// printable code points, so that any byte string can be written as a
// vocabulary entry of encoder.json or tokenizer.json.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace merak::model::text {

// The byte offset of the first byte of `text` that does not start a valid
// UTF-8 sequence (truncated, overlong, a surrogate, above U+10FFFF); nullopt
// when all of `text` is valid.
std::optional<size_t> first_invalid_utf8(std::string_view text);

// Throws merak::error naming `what` and the byte offset unless `text` is
// valid UTF-8.
void check_utf8(std::string_view text, const std::string& what);

// The code point `bytes_to_unicode` maps byte `b` to: printable Latin-1
// bytes map to themselves, the other 68 to U+0100.. in byte order.
char32_t byte_to_code_point(uint8_t b);

// The bytes a byte-level string stands for: every code point of `encoded`
// (UTF-8) must be one of the 256 of the alphabet. nullopt otherwise, with
// `bad` (when given) set to the first code point outside it.
std::optional<std::string> byte_level_decode(std::string_view encoded, char32_t* bad = nullptr);

// The byte-level string (UTF-8) that stands for `bytes`.
std::string byte_level_encode(std::string_view bytes);

}  // namespace merak::model::text
